"""One rank's engine (chapters 02-04): bind the device, join the groups, build the model on the meta
device and stream this rank's shard in, plug in the device's speed (minisgl/cpu/, minisgl/kernel/;
the capstone's TP steps after it, chapter 15), size the KV cache the same on every rank, then run
forward + sample. Beside it: the batch's way to the device (device.py), the memory budget and the
batch limits it leaves to the device (sizing.py), decode graphs (graphs.py, chapter 10) and the
precision (precision.py). With pipeline parallelism (chapter 13) the engine runs one stage
(`forward_stage`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from tqdm.auto import tqdm

from minisgl import cpu, kernel
from minisgl.attention import create_attention_backend
from minisgl.config import EngineConfig
from minisgl.core import Batch, Req, forward_context
from minisgl.distributed import (COMM_COUNTER, comm_site, destroy_distributed, join, min_over_ranks,
                                 recv_from_prev_stage, send_to_next_stage, wait_for_sends)
from minisgl.kvcache import KVCachePool
from minisgl.layers import local_kv_heads
from minisgl.models.checkpoint import count_tensors, dummy_checkpoint, iter_checkpoint
from minisgl.models.config import ModelConfig
from minisgl.models.registry import create_model
from minisgl.models.stage import PipelineStage
from minisgl.models.tp_ops import plug_in
from minisgl.models.weight import load_weights
from minisgl.trace import TRACE

from .device import TokenFuture, bind_device, to_device
from .graphs import decode_graphs
from .placeholders import resolve_placeholders
from .precision import resolve_precision, same_on_every_rank, torch_dtype
from .sampler import greedy_tokens, sample
from .sizing import kv_pages, with_batch_limits


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        """`config` as `minisgl.config.resolve_config` checked it; nothing is checked again here."""
        tp = config.tp_info
        self.model_path = Path(config.model_path)
        self.model_config = ModelConfig.from_dir(self.model_path).with_moe_parallel(config.moe_parallel)
        self.stage = PipelineStage.of(config.pp_info.rank, config.pp_info.size, self.model_config.num_layers,
                                      self.model_config.tie_word_embeddings)
        self.device = bind_device(config)
        with TRACE.span("join the group", "process", backend=config.dist_backend):
            self.groups = join(tp, config.dist_init_addr, self.device, config.dist_backend, pp=config.pp_info,
                               local_ranks=config.local_world_size, all_to_all=config.moe_parallel == "ep",
                               timeout_s=config.dist_timeout_s)  # sets the TP info every layer reads
        # dtype "auto" is measured where the engine runs, once: every rank takes world rank 0's choice
        self.config = config = same_on_every_rank(resolve_precision(config) if config.world_rank == 0 else config,
                                                  self.groups.world)
        # the KV cache's dtype: the model's, or bf16 under fp32 activations (CPU)
        self.dtype, self.kv_dtype = torch_dtype(config.dtype), torch_dtype(config.kv_cache_dtype)
        COMM_COUNTER.configure(counting=config.comm_stats_dir is not None)

        with TRACE.span("load weights", "process"):
            with torch.device("meta"):  # shapes only; real tensors arrive from the loader
                self.model = create_model(self.model_config, self.stage)
            self._load_weights()
            self._plug_in()
        kv_heads = local_kv_heads(self.model_config.num_kv_heads, tp.size)
        with TRACE.span("size the KV cache", "process"):
            num_pages = self._sync_num_pages(kv_heads)
        self.kv_pool = KVCachePool(len(self.stage.layers), num_pages, config.page_size, kv_heads,  # this stage's
                                   self.model_config.head_dim, self.kv_dtype, self.device)
        self.config = config = with_batch_limits(config, self.kv_pool.num_slots)  # the limits left to the device
        self.attn_backend = create_attention_backend(
            config.attention_backend, self.kv_pool, self.device, self.model_config.max_position_embeddings,
            config.max_running_requests, local_q_heads=self.model_config.num_heads // tp.size,
            batch_invariant=config.deterministic)
        self.overlap = config.overlap_schedule if config.overlap_schedule is not None else self.device.type == "cuda"
        self.overlap = self.overlap and self.stage.size == 1  # a pipeline keeps several batches in flight instead
        # the last step's greedy tokens, which fill the next step's placeholders (placeholders.py)
        self._future_tokens = torch.zeros(2 * config.max_running_requests, dtype=torch.int64, device=self.device)
        self.graph_runner, self.cpu_graphs = decode_graphs(self.model, self.attn_backend, config, self.device,
                                                           self.groups.backend, self._future_tokens)

    def _load_weights(self) -> None:
        """Stream the checkpoint through the loader into the model (chapter 04)."""
        config, tp, path = self.config, self.config.tp_info, self.model_path
        keep = self.stage.holds if self.stage.size > 1 else None  # a stage reads only its own tensors
        if config.load_format == "dummy":
            tensors, total = dummy_checkpoint(self.model_config, config.seed, self.device, keep), None
        elif config.quantization == "gguf":  # the GGUF's 4-bit weights, kept 4-bit (the CPU plug-in's source)
            tensors = cpu.GGUFCheckpoint(path, self.model_config, keep)
            total = len(tensors)
        else:
            tensors, total = iter_checkpoint(path, keep), count_tensors(path, keep)
        tensors = tqdm(tensors, total=total, desc=f"Loading weights (rank {tp.rank})", unit="tensor", leave=False,
                       disable=total is None or not config.progress or config.world_rank != 0)
        merge = None if config.tp_ops is None else config.tp_ops.shard_and_merge  # the capstone's (chapter 15)
        for name, weight in load_weights(tensors, self.model_config, tp.rank, tp.size, self.dtype, self.device, merge):
            self.model.set_weight(name, weight)
        still_empty = [name for name, w in self.model.state_dict().items() if isinstance(w, torch.Tensor) and w.is_meta]
        if still_empty:
            raise ValueError(f"checkpoint has no tensor for {still_empty[:3]}")

    def _plug_in(self) -> None:
        """Into the loaded model: its device's speed plug-in, then the capstone's TP steps (chapter 15),
        whose linears the fused CUDA decode layer would skip."""
        if self.device.type == "cuda":
            kernel.accelerate(self.model, fuse_decode_layers=self.config.tp_ops is None)
        else:
            cpu.accelerate(self.model, self.config, self.model_path, self.model_config)
        if self.config.tp_ops is not None:
            plug_in(self.model, self.config.tp_ops)

    def _sync_num_pages(self, kv_heads: int) -> int:
        """The pages every rank (of every stage) can afford, their minimum: all admit the same requests."""
        num_pages = kv_pages(self.config, self.device, len(self.stage.layers), kv_heads, self.model_config.head_dim,
                             self.kv_dtype)
        return num_pages if self.groups.world is None else min_over_ranks(num_pages, self.groups.world)

    @torch.inference_mode()
    def forward(self, batch: Batch) -> list[int]:
        """Run the model on `batch` and sample one token per request (identical on every rank)."""
        return sample(self.forward_logits(batch), batch.reqs, batch.emits)

    @torch.inference_mode()
    def forward_async(self, batch: Batch) -> TokenFuture:
        """Greedy tokens of `batch`, without waiting for the device. Token ids of a later batch may
        be placeholders -(i + 1), "token i of this step": the device fills them in (overlap)."""
        if self.graph_runner is not None and self.graph_runner.fits(batch):
            tokens = self.graph_runner.run(batch)[1]  # the graph kept them for the next step too
        else:
            tokens = greedy_tokens(self._forward_on_host(batch).float())  # [num_reqs], as sample() picks
            self._future_tokens[: tokens.numel()].copy_(tokens)
        return TokenFuture.of(tokens)

    @torch.inference_mode()
    def forward_logits(self, batch: Batch) -> torch.Tensor:
        """Logits [num_reqs, vocab] of each request's last new token. `batch` may live on the CPU:
        its tensors move to the device without a host-device sync."""
        if self.graph_runner is not None and self.graph_runner.fits(batch):
            return self.graph_runner.run(batch)[0]
        return self._forward_on_host(batch)

    def _forward_on_host(self, batch: Batch) -> torch.Tensor:
        """A step the host launches: a CPU graph's replay (or recording) where one fits, else the eager forward."""
        if self.cpu_graphs is not None and self.cpu_graphs.fits(batch):
            if self.overlap:  # placeholder ids -(i + 1) become token i of the previous step, in place
                resolve_placeholders(batch.input_ids, self._future_tokens)
            logits = self.cpu_graphs.run(batch)
            if logits is not None:
                return logits
        return self._forward_eager(batch)

    def _forward_eager(self, batch: Batch) -> torch.Tensor:
        batch = to_device(batch, self.device)
        # placeholder ids -(i + 1) become token i of the previous step, in place, on the device (a
        # CUDA graph does this itself, as its first kernel)
        resolve_placeholders(batch.input_ids, self._future_tokens)
        self.attn_backend.prepare(batch)
        counted = COMM_COUNTER.forward(batch.phase, batch.num_tokens, self.device)  # a no-op unless counting
        with forward_context(batch, self.attn_backend), counted:
            return self.model.forward(batch)

    @torch.inference_mode()
    def forward_stage(self, batch: Batch) -> list[int] | None:
        """This pipeline stage's part of `batch` (chapter 13): the previous stage's activations in (the first
        stage embeds the tokens), this stage's layers, the result on; the last stage samples the tokens."""
        batch = to_device(batch, self.device)
        self.attn_backend.prepare(batch)
        counted = COMM_COUNTER.forward(batch.phase, batch.num_tokens, self.device)  # a no-op unless counting
        with forward_context(batch, self.attn_backend), counted:
            carried = None
            if not self.stage.is_first:
                comm_site("from_prev_stage")
                shape = (2, batch.num_tokens, self.model_config.hidden_size)  # hidden states and residual
                carried = recv_from_prev_stage(shape, self.dtype, self.device).unbind(0)
            out = self.model.forward(batch, carried)
            if not self.stage.is_last:
                comm_site("to_next_stage")
                send_to_next_stage(torch.stack(out))  # [2, tokens, hidden]
                return None
        return sample(out, batch.reqs, batch.emits)

    def release(self, req: Req) -> None:
        """`req` finished: drop per-request state in the attention backend (its page-table row)."""
        self.attn_backend.release(req)

    def shutdown(self) -> None:
        if COMM_COUNTER.counting:
            config, tp, pp = self.config, self.config.tp_info, self.config.pp_info
            COMM_COUNTER.write(config.comm_stats_dir, tp_rank=tp.rank, tp_size=tp.size, dp_rank=config.dp_rank,
                               dp_size=config.dp_size, pp_rank=pp.rank, pp_size=pp.size,
                               dist_backend=self.groups.backend, device=str(self.device))
        if self.graph_runner is not None:
            self.graph_runner.destroy()  # graphs hold captured collectives: before the communicators
            self.graph_runner = None
        if self.stage.size > 1:
            wait_for_sends()  # the next stage may still be reading them
        destroy_distributed()
