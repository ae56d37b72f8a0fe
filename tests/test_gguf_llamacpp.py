"""ft's GGUF reader against llama.cpp's own files (tests/llamacpp_files.py: the llama-cpp-python sdist):
its vocabulary test vectors (the ids llama.cpp expects for ~47 texts per vocabulary) through the
tokenizer ft rebuilds from each GGUF vocabulary, and tiny checkpoints converted by its own
convert_hf_to_gguf.py, whose logits in ft must equal transformers' on the original weights."""

import json
import subprocess
import sys

import pytest
import torch
from tokenizers import AddedToken, Tokenizer
from bounds import assert_logits_close
from llamacpp_files import llama_cpp_dir
from tiny_checkpoints import load_reference, make_checkpoint

from ft_core import Engine
from ft_core.loader.gguf_file import GGUFFile
from ft_core.tokenizer.gguf_vocab import gguf_tokenizer

IDS = [(i * 37 + 11) % 500 + 3 for i in range(48)]
GLM_SPECIAL = ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"]


@pytest.mark.parametrize("name", ["qwen2", "llama-bpe", "gpt-2", "llama-spm", "phi-3"])
def test_vocabularies_give_llama_cpps_ids(name):
    models = llama_cpp_dir() / "models"
    path = models / f"ggml-vocab-{name}.gguf"
    tok = gguf_tokenizer(GGUFFile(path), str(path))[0]
    texts = (models / f"{path.name}.inp").read_text().split("\n__ggml_vocab_test__\n")
    want = (models / f"{path.name}.out").read_text().split("\n")
    assert len(texts) > 30
    for text, ids in zip(texts, want):
        assert tok.encode(text, add_special_tokens=False).ids == [int(x) for x in ids.split()], text


def test_vocabulary_without_scores_or_of_an_unknown_model_is_refused_by_name():
    """A SentencePiece vocabulary needs its scores (the join order); a tokenizer model ft does not
    build ('bert': WordPiece) is refused naming the key and the file."""
    from ft_core.errors import CheckpointError

    path = llama_cpp_dir() / "models" / "ggml-vocab-llama-spm.gguf"
    g = GGUFFile(path)

    class Meta:
        def __init__(self, **changed):
            self.changed = changed

        def get(self, key, default=None):
            return self.changed[key] if key in self.changed else g.get(key, default)

    with pytest.raises(CheckpointError, match=r"llama-spm\.gguf: .*tokenizer\.ggml\.scores"):
        gguf_tokenizer(Meta(**{"tokenizer.ggml.scores": None}), str(path))
    with pytest.raises(CheckpointError, match=r"llama-spm\.gguf: tokenizer\.ggml\.model 'bert'"):
        gguf_tokenizer(Meta(**{"tokenizer.ggml.model": "bert"}), str(path))


@pytest.fixture(scope="module")
def qwen_vocab(tmp_path_factory):
    """Qwen's real vocabulary (the converter recognises its tokenizer by hash) as tokenizer files."""
    path = llama_cpp_dir() / "models" / "ggml-vocab-qwen2.gguf"
    tok, config, _, _ = gguf_tokenizer(GGUFFile(path), str(path))
    return tok, config


def _checkpoint(path, vocab, arch: str, overrides: dict | None = None):
    """The tiny ``arch`` checkpoint at ``path`` with Qwen's vocabulary ``vocab`` (GLM's special tokens
    added for glm4_moe: its converter looks them up by name)."""
    tok, config = vocab
    if arch == "glm4_moe":
        tok = Tokenizer.from_str(tok.to_str())
        tok.add_special_tokens([AddedToken(t, special=True) for t in GLM_SPECIAL])
    hf = make_checkpoint(
        arch, path, overrides={"vocab_size": tok.get_vocab_size(), **(overrides or {})}
    )
    tok.save(str(hf / "tokenizer.json"))
    (hf / "tokenizer_config.json").write_text(
        json.dumps({**config, "tokenizer_class": "Qwen2Tokenizer"})
    )
    return hf


def _convert(hf, out, outtype: str, *flags: str):
    """llama.cpp's convert_hf_to_gguf.py on ``hf`` into ``out``; returns ``out``."""
    res = subprocess.run(
        [sys.executable, str(llama_cpp_dir() / "convert_hf_to_gguf.py"), str(hf),
         "--outfile", str(out), "--outtype", outtype, *flags],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return out


@pytest.mark.parametrize(
    "arch,outtype",
    [("qwen3_moe", "f32"), ("qwen2_moe", "f32"), ("olmoe", "f32"), ("mixtral", "f32"),
     ("gpt_oss", "f32"), ("qwen3_5_moe", "f32"), ("qwen3_next", "f32"), ("glm4_moe", "f32"),
     ("qwen3_moe", "bf16"), ("mixtral", "bf16"), ("qwen3_5_moe", "bf16"), ("qwen3_next", "bf16"),
     ("glm4_moe", "bf16"), ("deepseek_v3", "f32"), ("deepseek_v3", "bf16")],
)  # fmt: skip
def test_llama_cpp_converted_checkpoints_match_transformers(tmp_path, qwen_vocab, arch, outtype):
    # llama.cpp's converter maps no dense qwen2moe / qwen3next layer
    extra = {"mlp_only_layers": []} if arch in ("qwen2_moe", "qwen3_next") else {}
    hf = _checkpoint(tmp_path / arch, qwen_vocab, arch, extra)
    tiny = ["--no-mtp"] if arch in ("qwen3_5_moe", "qwen3_next") else []  # tiny: no MTP layer
    out = _convert(hf, tmp_path / f"{arch}.gguf", outtype, *tiny)
    eng = Engine.from_pretrained(out)
    ref = load_reference(hf)
    if arch == "mixtral":  # llama.cpp runs Mixtral without a sliding window
        ref.config.sliding_window = None
    with torch.no_grad():
        want = ref(torch.tensor([IDS])).logits[0].float()
    assert_logits_close(eng.score(IDS), want, eng.model_config)


def test_qwen35_with_its_mtp_head_gives_the_model_without_it(tmp_path, qwen_vocab):
    """Qwen3.5 / 3.6 GGUFs carry the multi-token-prediction head as extra blocks after the model's
    (``nextn_predict_layers``): ft runs the model's own layers only, so a file converted with the head
    gives exactly the logits of one converted without it (--no-mtp)."""
    from safetensors.torch import load_file, save_file

    hf = _checkpoint(tmp_path / "q35", qwen_vocab, "qwen3_5_moe")
    w = load_file(str(hf / "model.safetensors"))
    full = next(i for i, t in enumerate(json.loads((hf / "config.json").read_text())
                                        ["text_config"]["layer_types"]) if t == "full_attention")  # fmt: skip
    layer = f"model.language_model.layers.{full}."
    H = w["model.language_model.norm.weight"].shape[0]
    mtp = {
        "mtp.layers.0." + k[len(layer) :]: v.clone() for k, v in w.items() if k.startswith(layer)
    }
    mtp["mtp.fc.weight"] = torch.randn(H, 2 * H).to(w["lm_head.weight"].dtype) * 0.05
    for k in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        mtp[f"mtp.{k}.weight"] = w["model.language_model.norm.weight"].clone()
    save_file({**w, **mtp}, str(hf / "model.safetensors"))
    outs = {
        name: _convert(hf, tmp_path / f"{name}.gguf", "f32", *flags)
        for name, flags in (("with", []), ("without", ["--no-mtp"]))
    }
    g = GGUFFile(outs["with"])
    assert g.arch_get("nextn_predict_layers") == 1
    assert g.arch_get("block_count") == GGUFFile(outs["without"]).arch_get("block_count") + 1
    a, b = Engine.from_pretrained(outs["with"]), Engine.from_pretrained(outs["without"])
    assert a.model_config.num_layers == b.model_config.num_layers
    assert torch.equal(a.score(IDS), b.score(IDS))


def test_qwen35_q8_0_projections_keep_their_bits(tmp_path, qwen_vocab, monkeypatch):
    """A Qwen3.5 GGUF in Q8_0 (llama.cpp's converter, --outtype q8_0): the linear attention's input
    projections (one kernel matrix per part, the value heads' rows put back in Hugging Face's order as
    whole rows of blocks) and output projection (columns moved: its input reordered instead), the
    gated attention's q/k/v and o and the shared expert keep the file's bits, and give the logits of
    the same file read into float weights."""
    from ft_core.layers.dense import QuantDense
    from ft_core.loader.weights import WeightReader

    # Hv = 3 Hk: the value heads' tiled order is not its own inverse (with Hv = 2 Hk = 4 it is)
    sizes = {"linear_num_value_heads": 6, "linear_value_head_dim": 16}
    hf = _checkpoint(tmp_path / "q35", qwen_vocab, "qwen3_5_moe", sizes)
    out = _convert(hf, tmp_path / "q8.gguf", "q8_0", "--no-mtp")
    native = Engine.from_pretrained(out, dtype="float32")
    kinds = {type(attn).__name__: attn for _, attn, _, _ in native.model.layers}
    gdn, gated = kinds["GatedDeltaNet"], kinds["GatedAttention"]
    assert isinstance(gdn.w_in, list) and all(isinstance(w, QuantDense) for w in gdn.w_in)
    # out_proj's columns moved (Hv = 2 Hk): its stored bits times the input in their order
    assert isinstance(gdn.w_out, QuantDense) and gdn.out_order is not None
    assert isinstance(gated.wqkv, QuantDense) and isinstance(gated.wo, QuantDense)
    assert isinstance(native.model.layers[0][3].shared.gate, QuantDense)
    monkeypatch.setattr(WeightReader, "native", lambda self, prefixes: None)
    monkeypatch.setattr(WeightReader, "native_ordered", lambda self, prefix: None)
    floats = Engine.from_pretrained(out, dtype="float32")
    assert all(isinstance(w, torch.Tensor) for w in (floats.model.layers[0][1].w_in,
                                                       floats.model.layers[0][1].w_out))  # fmt: skip
    assert_logits_close(native.score(IDS), floats.score(IDS), native.model_config)


def test_deepseek2_with_softmax_routing_is_refused_by_name(tmp_path, qwen_vocab):
    """A deepseek2 file without the score-correction bias (exp_probs_b) nor a gating function is
    DeepSeek-V2's softmax routing, which ft does not run: refused, naming the file (here: the tiny
    DeepSeek-V3 converted by llama.cpp's converter after its e_score_correction_bias was removed)."""
    from safetensors.torch import load_file, save_file

    from ft_core.errors import CheckpointError

    hf = _checkpoint(tmp_path / "ds", qwen_vocab, "deepseek_v3")
    for f in hf.glob("*.safetensors"):
        w = load_file(str(f))
        save_file({k: v for k, v in w.items() if "e_score_correction_bias" not in k}, str(f))
    out = _convert(hf, tmp_path / "v2.gguf", "f32")
    assert not any(n.endswith("exp_probs_b.bias") for n in GGUFFile(out).tensors)
    with pytest.raises(CheckpointError, match=r"v2\.gguf: deepseek2 with softmax expert gating"):
        Engine.from_pretrained(out)


SPM_TEXTS = [
    "Hello world, the model routes each token to 8 experts.",
    "def f(x):\n    return x ** 2  # square\n\n\tTabs and  double  spaces ",
    "  leading spaces, Ünïcödé: naïve café — 東京 123456789 ∑ 🙂 ₿",
]


def _spm_mixtral(path):
    """The tiny Mixtral at ``path`` with a SentencePiece BPE vocabulary (byte fallback, digits
    split, as Llama's and Mistral's) trained here by the ``sentencepiece`` package itself, stored as
    the hub does: tokenizer.model and a LlamaTokenizer tokenizer_config.json. Returns (path, the
    SentencePieceProcessor)."""
    import io

    import sentencepiece as spm

    from ft_core.tokenizer.build import _corpus

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_corpus() + SPM_TEXTS), model_writer=buf, vocab_size=700,
        model_type="bpe", byte_fallback=True, split_digits=True, character_coverage=0.999,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2,
    )  # fmt: skip
    sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    ids = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
    hf = make_checkpoint("mixtral", path, overrides={"vocab_size": sp.vocab_size(), **ids})
    (hf / "tokenizer.json").unlink()
    (hf / "tokenizer.model").write_bytes(buf.getvalue())
    template = (
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
        "{{ '[INST] ' + m['content'] + ' [/INST]' }}{% else %}{{ m['content'] + eos_token }}"
        "{% endif %}{% endfor %}"
    )
    (hf / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
        "chat_template": template,
    }))  # fmt: skip
    return hf, sp


def test_sentencepiece_mixtral_gguf_tokenizes_as_sentencepiece(tmp_path):
    """A Mixtral with a SentencePiece vocabulary, converted by llama.cpp's converter (tokenizer.ggml
    .model 'llama': pieces and scores): ft's ids from the GGUF equal the ``sentencepiece`` package's
    own on text with spaces, tabs, digits and characters only bytes spell (byte fallback), BOS first;
    a special token in the text is its id, with a space put in front of the text after it as
    llama.cpp does; decoding gives the text back; the logits equal transformers'."""
    hf, sp = _spm_mixtral(tmp_path / "mixtral")
    out = _convert(hf, tmp_path / "spm.gguf", "f32")
    assert GGUFFile(out).get("tokenizer.ggml.model") == "llama"
    eng = Engine.from_pretrained(out)
    tok = eng.tokenizer
    assert any(p.startswith("<0x") for t in SPM_TEXTS for p in sp.encode(t, out_type=str))
    for text in SPM_TEXTS:
        want = sp.encode(text)
        assert tok.encode(text, add_special_tokens=False) == want, text
        assert tok.encode(text) == [sp.bos_id()] + want, text
        assert tok.decode(want) == sp.decode(want) == text, text
    text = "a</s>b c"
    assert tok.encode(text, add_special_tokens=False) == sp.encode("a") + [2] + sp.encode("b c")
    assert (tok.bos_token, tok.eos_token) == ("<s>", "</s>") and 2 in tok.eos_token_ids
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi there"}])
    assert prompt == "<s>[INST] Hi there [/INST]"
    ref = load_reference(hf)
    ref.config.sliding_window = None  # llama.cpp runs Mixtral without a sliding window
    ids = [sp.bos_id()] + sp.encode(SPM_TEXTS[0])
    with torch.no_grad():
        want_logits = ref(torch.tensor([ids])).logits[0].float()
    assert_logits_close(eng.score(ids), want_logits, eng.model_config)
