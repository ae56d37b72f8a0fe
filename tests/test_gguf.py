"""GGUF models (loader/gguf_*.py): tiny checkpoints written as GGUF under llama.cpp's converter
conventions (tests/tiny_gguf.py) give, in ft, the logits transformers gives in float32 on the same
weights dequantised from the GGUF's bits by llama.cpp's own ``gguf.quants.dequantize``; the tokenizer
rebuilt from the GGUF gives the Hugging Face tokenizer's ids; bad files are refused by name."""

import dataclasses
import re

import pytest
import torch
from bounds import assert_logits_close
from engine_spy import sampled_logits
from tiny_checkpoints import load_reference, make_checkpoint
from tiny_gguf import write_gguf

import ft_kernels
from ft_core import Engine, FTError, SamplingParams
from ft_core.config import EngineConfig
from ft_core.errors import CheckpointError, UnsupportedArchitectureError
from ft_core.experts.factory import x16_formats
from ft_core.layers.dense import QuantDense

IDS = [(i * 37 + 11) % 500 + 3 for i in range(48)]
KINDS3 = ("gate", "up", "down")
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
# sizes that whole blocks divide (K-quants: 256 columns), the rest as the tiny configs
SIZES = dict(hidden_size=256, head_dim=64, intermediate_size=256, moe_intermediate_size=256,
             shared_expert_intermediate_size=256)  # fmt: skip
# (architecture, expert type, dense type, bank format ft keeps the experts in)
CASES = [
    ("qwen3_moe", "F32", "F32", "f32"),
    ("qwen3_moe", "BF16", "BF16", "bf16"),
    ("qwen3_moe", "Q4_0", "Q8_0", "int4_sym"),
    ("qwen3_moe", "Q4_K", "Q4_K", "q4_k"),
    ("qwen3_moe", "Q4_K_M", "Q8_0", "q4_k"),  # ffn_down Q6_K in some layers: per-layer formats
    ("qwen3_moe", "Q4_K_M", "Q4_K_M", "q4_k"),  # attn_v in Q6_K: q, k, v kept as three matrices
    ("qwen2_moe", "Q5_K", "F16", "q5_k"),
    ("qwen2_moe", "Q8_0", "Q8_0", "int8_sym"),
    ("olmoe", "MXFP4", "BF16", "mxfp4"),
    ("olmoe", "Q6_K", "Q4_0", "q6_k"),
    ("olmoe", "Q2_K", "BF16", "q2_k"),
    ("qwen3_moe", "Q3_K_M", "Q3_K", "q3_k"),  # ffn_down Q5_K / Q4_K in some layers
    ("mixtral", "Q4_0", "Q8_0", "int4_sym"),
    ("mixtral", "Q4_K_M", "Q6_K", "q4_k"),  # llama's permuted Q / K rows kept as blocks
    ("gpt_oss", "MXFP4", "Q8_0", "mxfp4"),  # sinks, windows, yarn, biased experts
    ("gpt_oss", "BF16", "BF16", "bf16"),
]


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    cache = {}

    def get(arch):
        if arch not in cache:
            cache[arch] = make_checkpoint(
                arch, tmp_path_factory.mktemp(arch) / arch, overrides=SIZES
            )
        return cache[arch]

    return get


@pytest.mark.parametrize("arch,experts,dense,bank", CASES, ids=lambda v: str(v))
def test_gguf_matches_transformers_on_the_dequantised_weights(
    hf, tmp_path, arch, experts, dense, bank
):
    path, ref_dir = write_gguf(hf(arch), tmp_path / f"{arch}.gguf", experts, dense)
    eng = Engine.from_pretrained(path)
    assert eng.model.bank.fmt == bank  # Q4_0 / MXFP4 / K-quants stay in their bits in ft's kernels
    if (
        experts == "Q4_K_M"
    ):  # layer 0's ffn_down Q4_K, the last layer's Q6_K (llama-quantize's rule)
        assert eng.model.bank.layer_fmts[0] == ("q4_k", "q4_k")
        assert eng.model.bank.layer_fmts[-1] == ("q4_k", "q6_k")
    if experts == "Q3_K_M":  # layer 0's ffn_down Q5_K, the last layer's Q4_K (tiny_gguf's rule)
        assert eng.model.bank.layer_fmts[0] == ("q3_k", "q5_k")
        assert eng.model.bank.layer_fmts[-1] == ("q3_k", "q4_k")
    # dense projections in a type a kernel reads stay in the file's bits (keep_native)
    native = dense in ("Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "Q3_K", "Q2_K", "Q4_K_M")
    attn = eng.model.layers[0][1]
    if dense == "Q4_K_M":  # v in another type than q and k
        assert [p.w.fmt for p in attn.wqkv] == ["q4_k", "q4_k", "q6_k"]
    else:
        assert isinstance(attn.wqkv, QuantDense) == native
    assert isinstance(attn.wo, QuantDense) == native
    assert isinstance(eng.model.lm_head, QuantDense) == native
    assert isinstance(eng.model.embed, QuantDense) == native  # rows dequantised as looked up
    ref = load_reference(ref_dir)
    with torch.no_grad():
        want = ref(torch.tensor([IDS])).logits[0].float()
    assert_logits_close(eng.score(IDS), want, eng.model_config)


def test_split_gguf_equals_the_single_file(hf, tmp_path):
    one, _ = write_gguf(hf("qwen3_moe"), tmp_path / "one.gguf", "Q4_0", "Q8_0")
    first, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_0", "Q8_0", split=3)
    assert first.name == "m-00001-of-00003.gguf"
    a, b = Engine.from_pretrained(one), Engine.from_pretrained(first)
    assert torch.equal(a.score(IDS), b.score(IDS))
    assert a.generate(IDS[:9], GREEDY)[0].token_ids == b.generate(IDS[:9], GREEDY)[0].token_ids
    (tmp_path / "m-00002-of-00003.gguf").unlink()
    with pytest.raises(CheckpointError, match="missing m-00002-of-00003.gguf"):
        Engine.from_pretrained(first)


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral", "olmoe"])
def test_gguf_tokenizer_gives_the_hf_ids(hf, tmp_path, arch):
    """The tokenizer rebuilt from tokenizer.ggml.* against the checkpoint's tokenizer.json: ids of
    text, special and markup tokens, chat-template prompts; BOS, EOS, template."""
    from ft_core.tokenizer import Tokenizer

    path, _ = write_gguf(hf(arch), tmp_path / f"{arch}.gguf")
    g, h = Engine.from_pretrained(path).tokenizer, Tokenizer.from_dir(hf(arch))
    texts = [
        "Hello world, the model routes each token to 8 experts.",
        "def f(x):\n    return x ** 2  # square\n\n\tTabs and  double  spaces",
        "Ünïcödé: naïve café — 東京 123456789 ∑ 🙂",
        '<think>plan</think><tool_call>{"name": "ls"}</tool_call>',
        h.eos_token + " after " + (h.bos_token or ""),
    ]
    for t in texts:
        assert g.encode(t) == h.encode(t), t
        assert g.encode(t, add_special_tokens=False) == h.encode(t, add_special_tokens=False), t
        ids = h.encode(t)
        assert g.decode(ids) == h.decode(ids) and g.decode(ids, False) == h.decode(ids, False)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    prompt = h.apply_chat_template(msgs)
    assert g.apply_chat_template(msgs) == prompt and g.encode(prompt) == h.encode(prompt)
    assert (g.bos_token, g.eos_token) == (h.bos_token, h.eos_token)
    assert h.token_to_id(h.eos_token) in g.eos_token_ids
    assert g.vocab_size == h.vocab_size


def test_ft_generate_takes_a_gguf(hf, tmp_path):
    import subprocess
    import sys

    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_0", "Q8_0")
    want = Engine.from_pretrained(path).generate(IDS[:9], GREEDY)[0]
    assert len(want.token_ids) == 12
    res = subprocess.run(
        [sys.executable, "-m", "ft_serve.cli", "generate", "--model", str(path), "--max-tokens", "4",
         "--temperature", "0", "hello world"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0 and res.stdout.strip(), res.stderr[-2000:]


def _bytes_damaged(path, tmp_path, name, fn):
    data = bytearray(path.read_bytes())
    fn(data)
    out = tmp_path / name
    out.write_bytes(bytes(data))
    return out


def test_bad_gguf_files_are_refused_by_name(hf, tmp_path):
    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_0", "Q8_0")
    size = path.stat().st_size
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: size // 2])
    with pytest.raises(CheckpointError, match=r"cut\.gguf: not a readable GGUF file .*truncated"):
        Engine.from_pretrained(cut)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(CheckpointError, match=r"junk\.gguf: not a readable GGUF file"):
        Engine.from_pretrained(junk)
    with pytest.raises(
        CheckpointError, match=r"nope\.gguf: no such checkpoint directory or GGUF file"
    ):
        Engine.from_pretrained(tmp_path / "nope.gguf")


def test_unknown_architecture_unsupported_type_and_missing_metadata(hf, tmp_path):
    import gguf
    import numpy as np

    def small(arch, drop=()):
        w = gguf.GGUFWriter(str(tmp_path / f"{arch}-{len(drop)}.gguf"), arch)
        meta = {"block_count": 1, "embedding_length": 32, "attention.head_count": 2,
                "attention.layer_norm_rms_epsilon": 1e-6, "expert_count": 2, "expert_used_count": 1,
                "expert_feed_forward_length": 32, "context_length": 64}  # fmt: skip
        for k, v in meta.items():
            if k not in drop:
                (w.add_float32 if isinstance(v, float) else w.add_uint32)(f"{arch}.{k}", v)
        w.add_tokenizer_model("gpt2")
        w.add_token_list(["a", "b", "ab"])
        w.add_token_merges(["a b"])
        w.add_tensor("token_embd.weight", np.zeros((3, 32), np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return tmp_path / f"{arch}-{len(drop)}.gguf"

    with pytest.raises(
        UnsupportedArchitectureError, match=r"GGUF architecture 'bert' is not supported.*qwen3moe"
    ):
        Engine.from_pretrained(small("bert"))
    with pytest.raises(CheckpointError, match=r"metadata key 'qwen3moe\.block_count' is missing"):
        Engine.from_pretrained(small("qwen3moe", drop=("block_count",)))
    bad, _ = write_gguf(hf("qwen3_moe"), tmp_path / "i32.gguf", "I32", "Q8_0")
    with pytest.raises(
        FTError, match=r"i32\.gguf: tensor 'blk\.0\.ffn_gate_exps\.weight' has GGML type I32"
    ):
        Engine.from_pretrained(bad)


def test_models_by_ollama_and_lm_studio_names(hf, tmp_path, monkeypatch):
    """ollama:NAME[:TAG] reads Ollama's manifest and opens its model blob (no suffix); lmstudio:NAME
    the GGUF in that folder (the first part of a split one); wrong names list what is there."""
    import hashlib
    import json
    import shutil

    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_0", "Q8_0")
    want = Engine.from_pretrained(path).score(IDS)
    store = tmp_path / "ollama"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    (store / "blobs").mkdir(parents=True)
    shutil.copy(path, store / "blobs" / f"sha256-{digest}")
    man = store / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "q4"
    man.parent.mkdir(parents=True)
    man.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:00"},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"}]}))  # fmt: skip
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    assert torch.equal(Engine.from_pretrained("ollama:tiny:q4").score(IDS), want)
    with pytest.raises(CheckpointError, match=r"ollama:tiny: no manifest .*latest.*tiny:q4"):
        Engine.from_pretrained("ollama:tiny")

    lms = tmp_path / "lmstudio"
    one = lms / "pub" / "tiny-GGUF"
    one.mkdir(parents=True)
    shutil.copy(path, one / "tiny-Q4_0.gguf")
    monkeypatch.setenv("LMSTUDIO_MODELS", str(lms))
    assert torch.equal(Engine.from_pretrained("lmstudio:pub/tiny-GGUF").score(IDS), want)
    shutil.copy(path, one / "tiny-Q8_0.gguf")
    with pytest.raises(CheckpointError, match=r"several models .*tiny-Q4_0\.gguf.*tiny-Q8_0\.gguf"):
        Engine.from_pretrained("lmstudio:pub/tiny-GGUF")
    got = Engine.from_pretrained("lmstudio:pub/tiny-GGUF/tiny-Q8_0.gguf").score(IDS)
    assert torch.equal(got, want)
    with pytest.raises(CheckpointError, match=r"lmstudio:nobody/none: not found under"):
        Engine.from_pretrained("lmstudio:nobody/none")


def test_ft_convert_writes_an_ftw_of_a_gguf(hf, tmp_path):
    """ft convert --model X.gguf --out DIR: the FTW directory loads to the same engine, bit for bit
    (the dense tensors as ft read them, the bank in the same format, tokenizer files from the GGUF)."""
    from ft_core.loader.ftw_write import convert

    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_0", "Q8_0")
    summary = convert(path, tmp_path / "m.ftw")
    assert summary["bank_fmt"] == "int4_sym"
    a, b = Engine.from_pretrained(path), Engine.from_pretrained(tmp_path / "m.ftw")
    assert torch.equal(a.score(IDS), b.score(IDS))
    text = "Hello <think>x</think> world"
    assert a.tokenizer.encode(text) == b.tokenizer.encode(text)
    assert a.tokenizer.chat_template == b.tokenizer.chat_template
    assert a.tokenizer.eos_token_ids == b.tokenizer.eos_token_ids


def test_ft_convert_keeps_a_mixed_kquant_bank(hf, tmp_path):
    """A Q4_K_M-style GGUF (ffn_down Q6_K in some layers) -> FTW keeps each layer's formats and bytes
    (bit for bit the same logits); --format q6_k re-quantises every layer to one K-quant, within its
    quantiser's bound."""
    from ft_core.loader.ftw_write import convert

    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_K_M", "Q8_0")
    convert(path, tmp_path / "m.ftw")
    a, b = Engine.from_pretrained(path), Engine.from_pretrained(tmp_path / "m.ftw")
    assert b.model.bank.layer_fmts == a.model.bank.layer_fmts != ()
    assert torch.equal(a.score(IDS), b.score(IDS))
    summary = convert(path, tmp_path / "q6.ftw", fmt="q6_k")
    assert summary["bank_fmt"] == "q6_k"
    c = Engine.from_pretrained(tmp_path / "q6.ftw")
    assert c.model.bank.layer_fmts == () and c.model.bank.fmt == "q6_k"
    ids = torch.arange(a.model.bank.num_ids)
    for which in (
        "w13",
        "w2",
    ):  # within q6_k's quantiser bound (ft-kernels' test_quantisation_error)
        w, q = a.model.bank.dequant(ids, which), c.model.bank.dequant(ids, which)
        assert (q - w).abs().max() <= 0.03 * w.abs().max()
    assert torch.isfinite(c.score(IDS)).all()


def test_mixed_bank_rows_are_gapless(hf, tmp_path):
    """A mixed K-quant bank read from a GGUF holds each layer's rows gapless (``compact``): each
    layer's view is exactly the file's bytes of its three expert tensors, contiguous, with no padding
    read or counted; ``padded`` (what FTW stores) gives the same rows padded with zeros."""
    import numpy as np

    from ft_core.loader.gguf_file import GGUFFile

    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_K_M", "Q8_0")
    bank, g = Engine.from_pretrained(path).model.bank, GGUFFile(path)
    E, fmts = bank.num_experts, bank.layer_fmts
    assert bank.compact and len({f for _, f in fmts}) == 2
    padded = bank.padded()
    for m, n in enumerate(sorted({int(k.split(".")[1]) for k in g.tensors if "_exps" in k})):
        raw = {k: np.asarray(g.tensor(f"blk.{n}.ffn_{k}_exps.weight").data) for k in KINDS3}
        w13, w2 = (bank.layer_view(w, m)[m * E : (m + 1) * E] for w in ("w13", "w2"))
        assert w13.is_contiguous() and w2.is_contiguous()
        want13 = np.concatenate([raw["gate"].reshape(E, -1), raw["up"].reshape(E, -1)], axis=1)
        assert np.array_equal(w13.reshape(E, -1).numpy(), want13)
        assert np.array_equal(w2.reshape(E, -1).numpy(), raw["down"].reshape(E, -1))
        rows = padded.tensors["w2_q"][m * E : (m + 1) * E]
        assert torch.equal(rows[..., : w2.shape[2]], w2) and not rows[..., w2.shape[2] :].any()
    widest = sum(bank.tensors[k][0].numel() for k in ("w13_q", "w2_q"))
    assert bank.nbytes_per_id() < widest  # padding is not read


def test_ft_convert_keeps_a_q3_k_m_bank(hf, tmp_path):
    """A Q3_K_M-style GGUF (Q3_K experts, ffn_down Q5_K / Q4_K in some layers; Q3_K dense) -> FTW keeps each
    layer's formats and the dense projections' bits: the same logits bit for bit."""
    from ft_core.loader.ftw_write import convert

    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q3_K_M", "Q3_K")
    convert(path, tmp_path / "m.ftw")
    a, b = Engine.from_pretrained(path), Engine.from_pretrained(tmp_path / "m.ftw")
    assert b.model.bank.layer_fmts == a.model.bank.layer_fmts != ()
    wo = b.model.layers[0][1].wo
    assert isinstance(wo, QuantDense) and wo.w.fmt == "q3_k"
    assert torch.equal(a.score(IDS), b.score(IDS))


def test_mxfp4_bank_with_many_blocks_per_row(tmp_path):
    """MXFP4 experts whose rows hold more than 16 blocks (hidden 768: 24) fill the bank's 4-D
    [N, rows, blocks, 16] tensors whole (a regression: a row-bytes slice meant for padded K-quant rows
    once cut them at 16 blocks)."""
    sizes = {**SIZES, "hidden_size": 768}
    hf = make_checkpoint("qwen3_moe", tmp_path / "qwen3_moe", overrides=sizes)
    path, ref_dir = write_gguf(hf, tmp_path / "m.gguf", "MXFP4", "BF16")
    eng = Engine.from_pretrained(path)
    assert eng.model.bank.fmt == "mxfp4" and eng.model.bank.tensors["w13_blocks"].shape[2] == 24
    ref = load_reference(ref_dir)
    with torch.no_grad():
        want = ref(torch.tensor([IDS])).logits[0].float()
    assert_logits_close(eng.score(IDS), want, eng.model_config)


def _mapped_rss(path) -> int:
    """Bytes of ``path``'s memory mappings resident in this process (/proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line
            inside = len(head) >= 6 and head[5] == str(path)
        elif inside and head[0] == "Rss:":
            total += int(head[1]) << 10
    return total


@pytest.mark.parametrize(
    "experts,dense",
    [("Q4_K_M", "Q6_K"), ("Q8_0", "Q4_0"), ("Q4_0", "Q8_0"), ("MXFP4", "Q4_K"), ("BF16", "BF16"),
     ("Q2_K", "Q8_0")],
    ids=str,
)  # fmt: skip
def test_gguf_bank_built_in_chunks_releases_the_files_pages(
    hf, tmp_path, monkeypatch, experts, dense
):
    """The expert bank is built a few experts at a time (gguf_experts.CHUNK_BYTES), each chunk's file
    pages dropped once copied, and quantised dense tensors dequantised a few rows at a time
    (gguf_file.DEQUANT_BYTES): one expert / one row a step gives the same bank and values as one
    step a layer / tensor, and after the bank no page of the experts stays resident in the process
    (K-quants, copied from views of the mapping, once kept every page: 2.5x the file's bytes at peak)."""
    import sys

    import gguf
    import numpy as np

    from ft_core.loader import gguf_experts, gguf_file
    from ft_core.loader.gguf_file import GGUFFile

    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", experts, dense)
    g = GGUFFile(path)
    layers = sorted({int(n.split(".")[1]) for n in g.tensors if n.endswith("ffn_gate_exps.weight")})
    E, inter, hidden = g.tensor(f"blk.{layers[0]}.ffn_gate_exps.weight").shape
    whole = gguf_experts.gguf_bank(g, layers, E, hidden, inter)
    assert whole.nbytes_per_id() and whole.num_ids == len(layers) * E
    g = GGUFFile(path)
    monkeypatch.setattr(gguf_experts, "CHUNK_BYTES", 1)  # one expert a chunk
    monkeypatch.setattr(gguf_file, "DEQUANT_BYTES", 1)  # one row a step
    before = _mapped_rss(path) if sys.platform.startswith("linux") else 0
    chunked = gguf_experts.gguf_bank(g, layers, E, hidden, inter)
    if sys.platform.startswith("linux"):
        # a page fault maps its aligned 64 KiB around (Linux's fault_around_bytes): pages of the
        # tensors beside each expert tensor may stay mapped; the experts' own bytes are far more
        tensors = [
            g.tensor(f"blk.{n}.ffn_{k}_exps.weight") for n in layers for k in gguf_experts.KINDS
        ]
        slack = 2 * len(tensors) * (64 << 10)
        assert sum(t.data.nbytes for t in tensors) > slack
        assert _mapped_rss(path) <= before + slack, "pages of the experts stayed resident"
    assert chunked.fmt == whole.fmt and chunked.layer_fmts == whole.layer_fmts
    assert chunked.tensors.keys() == whole.tensors.keys()
    for k, t in whole.padded().tensors.items():  # mixed banks: a layer's tail is never written
        assert torch.equal(chunked.padded().tensors[k], t), k
    for name in ("output.weight", "blk.0.attn_q.weight"):
        t = g.tensor(name)
        want = gguf.quants.dequantize(np.asarray(t.data), t.type).astype(np.float32)
        want = torch.from_numpy(want).reshape(t.shape)
        assert torch.equal(t.to_torch(), want)
        assert torch.equal(t.values(slice(3, 7), torch.bfloat16), want[3:7].bfloat16())


@pytest.mark.parametrize("dense", ["Q8_0", "Q4_K", "Q6_K"])
@pytest.mark.parametrize(
    "gguf_name,name,attr",
    [("output.weight", "lm_head", "lm_head"), ("token_embd.weight", "model.embed_tokens", "embed")],
)
def test_a_nan_scale_in_a_stored_matrix_is_refused_by_name(
    hf, tmp_path, dense, gguf_name, name, attr
):
    """The LM head and the embedding kept in the file's bits (never dequantised whole) are still checked: a
    NaN f16 scale in the first block is refused, naming the file and the tensor."""
    import gguf

    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_0", dense)
    t = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == gguf_name)
    at = int(t.data_offset) + (208 if dense == "Q6_K" else 0)  # the block's f16 d
    bad = _bytes_damaged(
        path, tmp_path, "nan.gguf", lambda d: d.__setitem__(slice(at, at + 2), b"\x00\x7e")
    )
    with pytest.raises(
        CheckpointError, match=rf"nan\.gguf: tensor '{re.escape(name)}\.weight' holds 1 NaN/inf"
    ):
        Engine.from_pretrained(bad)
    assert isinstance(getattr(Engine.from_pretrained(path).model, attr), QuantDense)


@pytest.mark.parametrize("dtype,int8", [("bfloat16", False), ("bfloat16", True)])
def test_q4_k_m_decode_plans_equal_op_by_op(hf, tmp_path, dtype, int8):
    """A Q4_K_M file (experts' ffn_down and attn_v in Q6_K in some layers): the decode plan runs GQA's q, k, v
    as three matrices as the op-by-op path does, bit for bit. The Q4_K (and Q6_K) experts and dense projections
    are repacked 16 rows interleaved (q4_k_x16, q6_k_x16) in both engines where a rows-in-lanes kernel takes
    the engine's activations (``x16_formats``): int8 on AVX2 and AVX-512 VNNI, bf16 on AMD's AVX-512 BF16,
    16-bit on AVX2 (Q4_K only; fp32 activations: below)."""
    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_K_M", "Q4_K_M")
    repacked = x16_formats(EngineConfig(model="m", dtype=dtype, int8_activations=int8))

    def x16(f):
        return f"{f}_x16" if f in repacked else f

    def formats(eng):
        assert eng.model.bank.layer_fmts[0] == (x16("q4_k"),) * 2
        assert eng.model.bank.layer_fmts[-1] == (x16("q4_k"), x16("q6_k"))
        # the dense projections too (q, k, o in Q4_K; v in Q6_K)
        fmts = [p.w.fmt for p in eng.model.layers[0][1].wqkv]
        assert fmts == [x16("q4_k")] * 2 + [x16("q6_k")]
        assert eng.model.layers[0][1].wo.w.fmt == x16("q4_k")

    _plans_equal_op_by_op(path, formats, dtype=dtype, int8_activations=int8)


def _plans_equal_op_by_op(path, check, **options) -> None:
    """Engines on ``path`` (``options``) with decode plans and without (each passed to ``check`` first) give the
    same greedy tokens and sampled logits, bit for bit."""
    out = []
    for plans in (True, False):
        eng = Engine.from_pretrained(path, decode_plans=plans, **options)
        assert (sum(p is not None for p in eng.model.plans) > 0) == plans
        check(eng)
        rows = sampled_logits(eng)
        seqs = [eng.add_request(p, GREEDY) for p in (IDS[:9], IDS[9:12])]
        while not all(s.finished for s in seqs):
            eng.step()
        out.append(([s.output_ids for s in seqs], {k: torch.stack(v) for k, v in rows.items()}))
    (toks_p, rows_p), (toks_o, rows_o) = out
    assert toks_p == toks_o and rows_p.keys() == rows_o.keys()
    for k in rows_p:
        assert torch.equal(rows_p[k], rows_o[k]), (k, (rows_p[k] - rows_o[k]).abs().max())


@pytest.mark.parametrize(
    "arch,experts,dense,fmt",
    [
        ("gpt_oss", "MXFP4", "Q8_0", "mxfp4"),
        ("qwen3_moe", "Q4_0", "Q4_0", "int4_sym"),
        ("qwen2_moe", "Q8_0", "Q8_0", "int8_sym"),
    ],
)
def test_interleaving_4_bit_experts_keeps_their_values(hf, tmp_path, arch, experts, dense, fmt):
    """ExpertBank.interleave repacks an MXFP4, INT4 (GGUF Q4_0) or INT8 (Q8_0) bank whole (codes and scales of both
    kinds) in place to its X16 format, INT4 and INT8 scales in f16 as in the file: every expert dequantises to the
    same values, and the kernels read the new
    layout (bf16 x: the rows-in-lanes kernel on AMD's AVX-512 BF16, the scalar twin elsewhere) within the fp32
    bound. A bfloat16 engine on a CPU with that kernel repacks its experts (GPT-OSS: biased ones; Qwen2-MoE: a
    shared expert too) and projections (Q8_0, Q4_0) itself, and its decode plans and the op-by-op path give the same tokens and logits bit for
    bit."""
    path, _ = write_gguf(hf(arch), tmp_path / "m.gguf", experts, dense)
    bank = Engine.from_pretrained(path).model.bank  # float32: as stored
    assert bank.fmt == fmt
    ids = torch.arange(bank.num_ids)
    before = {w: bank.dequant(ids, w) for w in ("w13", "w2")}
    assert bank.interleave(("q4_k",)) == 0 and bank.fmt == fmt
    assert bank.interleave((fmt,)) == 2 and bank.fmt == f"{fmt}_x16"
    for w in ("w13", "w2"):
        assert torch.equal(bank.dequant(ids, w), before[w])
    w13, w2 = bank.kernel_weights()
    assert w13.fmt == w2.fmt == f"{fmt}_x16"
    # GGUF's Q4_0 / Q8_0 scales are f16 in the file: kept so (fewer bytes a token); e8m0 bytes stay
    want = torch.uint8 if fmt == "mxfp4" else torch.float16
    assert w13.scale.dtype == w2.scale.dtype == want
    one = dataclasses.replace(w13, q=w13.q[1:2], scale=w13.scale[1:2], bias=None)
    h = torch.randn(3, bank.hidden).bfloat16()
    W = ft_kernels.reference.dequantize(one)[0].double()
    exact = h.double() @ W.T
    # fp32 sums of bank.hidden exact products, then one rounding: gamma(K) |h| |W| + u |y|
    bound = bank.hidden * 2.0**-24 * (h.double().abs() @ W.abs().T) + 2.0**-24 * exact.abs()
    assert ((ft_kernels.linear(h, one).double() - exact).abs() <= bound).all()
    dense_fmt = {"Q4_0": "int4_sym", "Q8_0": "int8_sym"}[dense]
    repacked = x16_formats(EngineConfig(model="m", dtype="bfloat16"))
    fmt, dense_fmt = (f"{f}_x16" if f in repacked else f for f in (fmt, dense_fmt))

    def formats(eng):
        assert eng.model.bank.fmt == fmt
        wo = eng.model.layers[0][1].wo.w
        assert wo.fmt == dense_fmt
        assert wo.scale.dtype == (torch.float16 if dense_fmt.endswith("_x16") else torch.float32)

    _plans_equal_op_by_op(path, formats, dtype="bfloat16")


def test_fp32_engines_keep_q4_k_row_wise(hf, tmp_path):
    """No rows-in-lanes kernel takes fp32 activations (the exact path): a float32 engine keeps Q4_K and Q6_K
    experts and projections as stored, row after row, on every CPU."""
    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_K_M", "Q4_K_M")
    eng = Engine.from_pretrained(path, dtype="float32")
    assert eng.model.bank.layer_fmts[0] == ("q4_k", "q4_k")
    assert eng.model.bank.layer_fmts[-1] == ("q4_k", "q6_k")
    assert [p.w.fmt for p in eng.model.layers[0][1].wqkv] == ["q4_k"] * 2 + ["q6_k"]
    assert eng.model.layers[0][1].wo.w.fmt == "q4_k"


def test_interleaving_k_quant_experts_keeps_their_values(hf, tmp_path):
    """ExpertBank.interleave repacks the Q4_K and Q6_K kinds of a mixed bank in place (Q4_K alone first, Q6_K left
    as stored; then Q6_K): every expert's weights dequantise to the same values after, and the kernels read the
    new layouts (int8 x, bf16 x)."""
    path, _ = write_gguf(hf("qwen3_moe"), tmp_path / "m.gguf", "Q4_K_M", "Q8_0")
    bank = Engine.from_pretrained(path).model.bank
    ids = torch.arange(bank.num_ids)
    before = {w: bank.dequant(ids, w) for w in ("w13", "w2")}
    fmts = bank.layer_fmts
    assert bank.interleave(("q4_k",)) == sum(f == "q4_k" for pair in fmts for f in pair) > 0
    assert bank.layer_fmts == tuple(
        tuple("q4_k_x16" if f == "q4_k" else f for f in p) for p in fmts
    )
    assert bank.interleave(("q4_k", "q6_k")) == sum(f == "q6_k" for pair in fmts for f in pair) > 0
    assert bank.layer_fmts == tuple(tuple(f"{f}_x16" for f in p) for p in fmts)
    for w in ("w13", "w2"):
        assert torch.equal(bank.dequant(ids, w), before[w])
    x = torch.randn(3, bank.hidden)
    w13, w2 = bank.kernel_weights(0)
    assert w13.fmt == "q4_k_x16"
    want = ft_kernels.reference.linear(x, dataclasses.replace(w13, q=w13.q[:1]), act_int8=True)
    got = ft_kernels.linear(x, dataclasses.replace(w13, q=w13.q[:1]), act_int8=True)
    assert torch.allclose(got, want.float(), rtol=1e-4, atol=1e-4)
    m = next(m for m, p in enumerate(fmts) if p[1] == "q6_k")
    w2 = bank.kernel_weights(m)[1]  # flat ids: layer m's experts from m * E
    w2 = dataclasses.replace(w2, q=w2.q[m * bank.num_experts :][:1])
    assert w2.fmt == "q6_k_x16"
    h = torch.randn(3, bank.inter).bfloat16()
    W = ft_kernels.reference.dequantize(w2)[0].double()
    exact = h.double() @ W.T
    # fp32 sums of bank.inter exact products, then one rounding: gamma(K) |h| |W| + u |y|
    bound = bank.inter * 2.0**-24 * (h.double().abs() @ W.abs().T) + 2.0**-24 * exact.abs()
    assert ((ft_kernels.linear(h, w2).double() - exact).abs() <= bound).all()


@pytest.mark.parametrize(
    "arch,experts,dense,kinds",
    [("qwen3_moe", "Q3_K_M", "Q3_K", ("q3_k", "q5_k")), ("qwen2_moe", "Q5_K", "F16", ("q5_k",))],
)
def test_interleaving_q3_k_q5_k_experts_keeps_their_values(
    hf, tmp_path, arch, experts, dense, kinds
):
    """Q3_K and Q5_K experts (a Q3_K_M file: Q3_K, ffn_down Q5_K in some layers; a Q5_K file's every kind) are
    repacked 16 rows interleaved (q3_k_x16, q5_k_x16) in place: every expert dequantises to the same values. A
    bfloat16 engine on a CPU with those rows-in-lanes kernels (AMD's AVX-512 BF16) repacks them itself (the
    Q3_K projections too), and its decode plans and the op-by-op path give the same tokens and logits bit for
    bit."""
    path, _ = write_gguf(hf(arch), tmp_path / "m.gguf", experts, dense)
    bank = Engine.from_pretrained(path).model.bank  # float32: as stored
    pairs = bank.layer_fmts or ((bank.fmt,) * 2,)
    ids = torch.arange(bank.num_ids)
    before = {w: bank.dequant(ids, w) for w in ("w13", "w2")}
    for k in kinds:
        assert bank.interleave((k,)) == sum(f == k for p in pairs for f in p) > 0
    after = bank.layer_fmts or ((bank.fmt,) * 2,)
    assert after == tuple(tuple(f"{f}_x16" if f in kinds else f for f in p) for p in pairs)
    for w in ("w13", "w2"):
        assert torch.equal(bank.dequant(ids, w), before[w])
    repacked = x16_formats(EngineConfig(model="m", dtype="bfloat16"))
    x16 = {f"{k}_x16" if k in repacked else k for k in kinds}

    def formats(eng):
        bank = eng.model.bank
        assert {f for p in (bank.layer_fmts or ((bank.fmt,) * 2,)) for f in p} >= x16
        if dense == "Q3_K":
            assert eng.model.layers[0][1].wo.w.fmt in x16

    _plans_equal_op_by_op(path, formats, dtype="bfloat16")


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen2_moe"])
def test_projections_kept_as_stored_are_never_dequantised(hf, tmp_path, monkeypatch, arch):
    """Loading a GGUF whose attention projections the kernels read as stored dequantises none of
    them for a float copy (the layer is built on placeholders, then given the stored bits). Where
    the swap cannot take them all -- qwen2_moe's biased q / k / v with v in another type than q and
    k ("Q4_K_M") stay one float matrix -- the layer is loaded again for real, and its logits equal
    transformers' on the same weights."""
    from ft_core.loader.gguf_read import GGUFIndex

    seen = []
    get = GGUFIndex.get
    monkeypatch.setattr(GGUFIndex, "get", lambda self, n, *a: (seen.append(n), get(self, n, *a))[1])
    path, ref_dir = write_gguf(hf(arch), tmp_path / f"{arch}.gguf", "Q8_0", "Q4_K_M")
    eng = Engine.from_pretrained(path)
    projs = {n.split(".")[-2] for n in seen if ".self_attn." in n and "_proj." in n}
    attn = eng.model.layers[0][1]
    if arch == "qwen3_moe":
        assert projs == set() and isinstance(attn.wo, QuantDense)
    else:  # the biased fused q / k / v could not be swapped: loaded, every layer, for real
        assert {"q_proj", "k_proj", "v_proj"} <= projs and not isinstance(attn.wqkv, QuantDense)
        assert not torch.isnan(attn.wqkv).any()
    ref = load_reference(ref_dir)
    with torch.no_grad():
        want = ref(torch.tensor([IDS])).logits[0].float()
    assert_logits_close(eng.score(IDS), want, eng.model_config)
