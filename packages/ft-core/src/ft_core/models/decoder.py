"""The decoder shared by every supported architecture: embeddings, N x (norm, attention, norm,
dense MLP or MoE), final norm, LM head. Architecture differences live in ModelConfig and in the
tensor names below. The attention of a layer is GQA, MLA, gated GQA or Gated DeltaNet (hybrid models,
whose recurrent state travels in ``ForwardBatch.state``, as do the windows of sliding-window layers
kept as state). Vision-language checkpoints keep the text
model under ``model.language_model.`` (Qwen3.5); the prefix is found from the stored names.

Legend: T = packed tokens, H = hidden, V = vocab.
"""

from __future__ import annotations

import torch

from ft_core.cache.kv_cache import KVLayout, PagedKVCache
from ft_core.config import EngineConfig
from ft_core.errors import FTError
from ft_core.experts.factory import build_backend, x16_formats
from ft_core.layers.attn_gated import GatedAttention
from ft_core.layers.attn_gqa import GQAttention
from ft_core.layers.attn_mla import MLAttention
from ft_core.layers.basic import DenseMLP, rms_norm
from ft_core.layers.batch import ForwardBatch
from ft_core.layers.dense import QuantDense, embedding, linear, small_forward
from ft_core.layers.linear_attn import GatedDeltaNet
from ft_core.layers.moe import MoELayer
from ft_core.layers.norm_offset import offset_rms_norm
from ft_core.layers.rope import Rotary
from ft_core.model_config import ModelConfig
from ft_core.models.decode_plan import layer_plan, plan_applies, run_stack, stack_runs
from ft_core.models.dense_quant import interleave_dense, keep_native, native_matrix, quantize_dense
from ft_core.models.placement import holds_nan, place_dense
from ft_core.models.weight_source import WeightSource

# Per-architecture module names (hub checkpoints): MoE block and router.
_MLP_NAME = {"mixtral": "block_sparse_moe"}
_ROUTER_NAME = {"gpt_oss": "router"}


class Decoder:
    def __init__(self, r: WeightSource, cfg: ModelConfig, engine: EngineConfig):
        self.cfg = cfg
        H, V = cfg.hidden_size, cfg.vocab_size
        m = (
            "model.language_model."
            if r.has("model.language_model.embed_tokens.weight")
            else "model."
        )
        self.dtype = engine.torch_dtype
        # a quantised source's stored bits where a CPU kernel reads them (not on a GPU, not re-quantised)
        native = engine.dense_format is None and engine.dense_device == "cpu"
        # its embedding in the stored bits (rows dequantised as looked up), else as loaded
        embed = native_matrix(r, f"{m}embed_tokens", V, H, False) if native else None
        self.embed = (
            embed if embed is not None else r.tensor(f"{m}embed_tokens.weight", (V, H), finite=True)
        )
        self.rotary = Rotary(cfg.rope)
        mlp_name = _MLP_NAME.get(cfg.model_type, "mlp")
        moe_prefixes = [
            f"{m}layers.{i}.{mlp_name}" for i in range(cfg.num_layers) if cfg.moe_layers[i]
        ]
        self.bank = r.expert_bank(cfg, moe_prefixes) if moe_prefixes else None
        self.backend = None  # built once the dense weights are in place (below): it sizes the cache
        self.layers = []
        moe_index = 0
        native_saved = 0  # bytes a decode token reads less for keeping a GGUF's stored bits
        state_layers = cfg.state_layers(
            engine.window_state
        )  # per-sequence state slots, not paged KV
        linear_impl = engine.resolved_linear_attn_impl if cfg.linear_layers else "torch"
        deferred = native and hasattr(r, "defer_native")
        for i in range(cfg.num_layers):
            p = f"{m}layers.{i}"
            args = (r, cfg, i, p, mlp_name, moe_index, state_layers, linear_impl)
            start = r.dense_bytes
            if deferred:  # projections a kernel reads as stored come as placeholders: no float copy
                r.defer_native = True
            try:
                layer = self._layer(*args)
            finally:
                if deferred:
                    r.defer_native = False
            if native:  # a quantised source's own bits where a kernel reads them
                saved = keep_native(layer, r, p, engine.int8_activations)
                if deferred and holds_nan(layer):  # a placeholder it did not swap: load for real
                    r.dense_bytes = start
                    layer = self._layer(*args)
                    saved = keep_native(layer, r, p, engine.int8_activations)
                native_saved += saved
            moe_index += bool(cfg.moe_layers[i])
            self.layers.append(layer)
        self.norm = self._norm_weight(r, f"{m}norm.weight")
        if cfg.tie_word_embeddings or not r.has("lm_head.weight"):
            self.lm_head = self.embed
        elif native and (
            (head := native_matrix(r, "lm_head", V, H, engine.int8_activations)) is not None
        ):  # the stored bits, never a float copy: not in r.dense_bytes, so counted here
            self.lm_head = head
            native_saved -= head.nbytes()
        else:
            self.lm_head, _ = r.linear("lm_head", V, H, finite=True)
        native_embed = isinstance(self.embed, QuantDense)  # not in r.dense_bytes
        embed_bytes = (
            self.embed.nbytes() if native_embed else self.embed.numel() * self.embed.element_size()
        )
        # Weight bytes one decode token reads outside the routed experts (one embedding row: ~0).
        self.dense_bytes_per_token = (
            r.dense_bytes
            - (0 if native_embed else embed_bytes)
            + (embed_bytes if self.lm_head is self.embed else 0)
        )
        if engine.dense_format is not None:
            self.dense_bytes_per_token -= quantize_dense(
                self, engine.dense_format, engine.int8_activations
            )
        else:  # a quantised source's own bits where a kernel reads them (GGUF)
            self.dense_bytes_per_token -= native_saved
        if engine.dense_device == "cpu" and (fmts := x16_formats(engine)):
            # Q4_K / Q6_K / MXFP4 / INT4 / INT8 / FP8 projections in the rows-in-lanes kernels' layout
            interleave_dense(self, fmts)
        if engine.dense_device != "cpu":  # before the expert cache takes the free device memory
            place_dense(self, torch.device(engine.dense_device))
        if self.bank is not None:
            self.backend = build_backend(self.bank, cfg.moe, engine, len(moe_prefixes))
            for *_, mlp in self.layers:
                if isinstance(mlp, MoELayer):
                    mlp.backend = self.backend
        # Each layer's one-call decode plan (None: the layer runs op by op), after quantize_dense.
        plans = engine.decode_plans and engine.dense_device == "cpu"  # plans run the CPU kernels
        self.plans = [layer_plan(cfg, *layer) if plans else None for layer in self.layers]
        self.stacks = stack_runs(
            self.plans
        )  # each run of planned layers, by its first layer: one call a step

    @property
    def device(self) -> torch.device:
        """Where the dense weights and activations live."""
        return (self.embed.w.q if isinstance(self.embed, QuantDense) else self.embed).device

    def _layer(self, r, cfg, i, p, mlp_name, moe_index, state_layers, linear_impl) -> tuple:
        """Decoder layer ``i`` (prefix ``p``) as (input norm, attention, post-attention norm, MLP)."""
        if i in cfg.linear_layers:
            attn = GatedDeltaNet(r, cfg, i, f"{p}.linear_attn", state_layers.index(i), linear_impl)
        elif i in state_layers:  # a sliding window kept as state (GPT-OSS)
            if cfg.mla is not None or cfg.attn_output_gate:
                raise FTError(
                    f"window_state: layer {i}'s attention kind keeps no window state; use window_state=False"
                )
            attn = GQAttention(r, cfg, i, f"{p}.self_attn", self.rotary, state_layers.index(i))
        else:
            attn_cls = (
                MLAttention
                if cfg.mla is not None
                else GatedAttention
                if cfg.attn_output_gate
                else GQAttention
            )
            attn = attn_cls(r, cfg, i, f"{p}.self_attn", self.rotary)
        if cfg.moe_layers[i]:
            router = _ROUTER_NAME.get(cfg.model_type, "gate")
            mlp = MoELayer(r, cfg, f"{p}.{mlp_name}", router, moe_index, self.bank, self.backend)
        else:
            mlp = DenseMLP(r, f"{p}.mlp", cfg.hidden_size, cfg.dense_intermediate)
        ln1 = self._norm_weight(r, f"{p}.input_layernorm.weight")
        ln2 = self._norm_weight(r, f"{p}.post_attention_layernorm.weight")
        return ln1, attn, ln2, mlp

    def _norm_weight(self, r: WeightSource, name: str) -> torch.Tensor:
        """An RMSNorm weight [H]; (1 + w) in float32 for the (1 + w) norms of the Qwen3-Next family."""
        if self.cfg.norm_offset:
            return 1 + r.tensor(name, (self.cfg.hidden_size,), torch.float32, finite=True)
        return r.tensor(name, (self.cfg.hidden_size,), finite=True)

    def _rms_norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (offset_rms_norm if self.cfg.norm_offset else rms_norm)(x, w, self.cfg.rms_eps)

    def weight_bytes_per_token(self) -> int:
        """Weight bytes one decode token of one sequence reads: dense weights + top-k experts per MoE layer."""
        experts = 0
        if self.bank is not None:
            experts = self.bank.nbytes_per_id() * self.cfg.moe.top_k * sum(self.cfg.moe_layers)
        return self.dense_bytes_per_token + experts

    def kv_layouts(self, num_pages: int, page_size: int, dtype: torch.dtype) -> list[KVLayout]:
        return [attn.kv_layout(num_pages, page_size, dtype) for _, attn, _, _ in self.layers]

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        size = torch.tensor([], dtype=dtype).element_size()
        return sum(l.kv_heads * (l.k_dim + l.v_dim) * size for l in self.kv_layouts(1, 1, dtype))

    @torch.inference_mode()
    def forward(
        self,
        batch: ForwardBatch,
        kv: PagedKVCache,
        routing_log: list | None = None,
        finite_log: list | None = None,
    ) -> torch.Tensor:
        """Run every layer over the packed tokens; writes their K/V. Returns hidden [T, H] after the final norm.
        ``routing_log`` (if given) receives each MoE layer's flat expert ids [T, k] in layer order.
        ``finite_log`` (if given; a diagnosis, not the serving path) receives
        ``(where, all finite)`` after the embedding and each layer's attention and MLP, e.g.
        ``("layer 3 attention", False)``."""

        def trace(where: str, x: torch.Tensor) -> None:
            if finite_log is not None:
                finite_log.append((where, bool(torch.isfinite(x).all())))

        with small_forward(batch.input_ids.shape[0], self.device):
            x = embedding(batch.input_ids, self.embed, self.dtype)
            trace("the embedding", x)
            cos_sin = self.rotary.cos_sin(batch.positions)
            k = self.cfg.moe.top_k if self.bank is not None else 0
            planned = finite_log is None and k > 0 and plan_applies(batch, x)
            done = 0  # the layers before it ran in a stack
            for i, (ln1, attn, ln2, mlp) in enumerate(self.layers):
                if i < done:
                    continue
                stack = self.stacks.get(i) if planned else None
                if stack is not None and run_stack(stack, i, x, batch, kv, cos_sin, routing_log, k):
                    done = i + len(stack.layers)
                    continue
                x = x + attn(self._rms_norm(x, ln1), batch, kv, cos_sin)
                trace(f"layer {i} attention", x)
                h = self._rms_norm(x, ln2)
                x = x + (mlp(h, routing_log) if isinstance(mlp, MoELayer) else mlp(h))
                trace(f"layer {i} mlp", x)
            x = self._rms_norm(x, self.norm)
            trace("the final norm", x)
            return x

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [n, H] -> float32 logits [n, V]."""
        with small_forward(h.shape[0], self.device):
            return linear(h, self.lm_head, dtype=torch.float32)
