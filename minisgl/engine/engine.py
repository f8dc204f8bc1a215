"""One rank's engine: bind the device, join the TP group, build the model on the meta device and
stream its shard in, size the KV cache (the same on every rank) and the batch limits left to the
device (limits.py), and run forward + sample (chapters 02-04). Once the model is loaded, its device's speed plug-in goes in (minisgl/cpu/ or
minisgl/kernel/; the capstone's TP steps after it, chapter 15). On CUDA it also captures decode CUDA
graphs and can run a step asynchronously, so the scheduler prepares the next step meanwhile; on a
CPU it records decode steps that are all C kernel calls as CPU graphs (chapter 10). With pipeline
parallelism (chapter 13) it is one stage: its layers only, activations in from the previous stage
and out to the next (`forward_stage`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from minisgl import cpu, kernel
from minisgl.attention import create_attention_backend
from minisgl.config import EngineConfig
from minisgl.core import Batch, Req, forward_context
from minisgl.distributed import (
    COMM_COUNTER,
    broadcast_json,
    comm_site,
    destroy_distributed,
    join,
    min_over_ranks,
    recv_from_prev_stage,
    send_to_next_stage,
    wait_for_sends,
)
from minisgl.kvcache import KVCachePool
from minisgl.layers import local_kv_heads
from minisgl.models.checkpoint import count_tensors, dummy_checkpoint, iter_checkpoint
from minisgl.models.config import ModelConfig
from minisgl.models.registry import create_model
from minisgl.models.stage import PipelineStage
from minisgl.models.tp_ops import plug_in
from minisgl.models.weight import load_weights
from minisgl.trace import TRACE

from .cuda_graph import CudaGraphRunner
from .limits import with_batch_limits
from .placeholders import resolve_placeholders
from .precision import resolve_precision
from .sampler import greedy_tokens, sample

logger = logging.getLogger(__name__)

_CPU_KV_BUDGET_CAP = 1 << 30  # 1 GiB per rank is ~20k SmolLM2 tokens in fp32: plenty on a laptop
_MAX_GRAPH_BS = 256


@dataclass
class TokenFuture:
    """Greedy tokens of a step still running on the device; `tokens()` waits for them."""

    host: torch.Tensor  # [num_reqs] int64 (pinned on CUDA), filled by an async copy
    event: torch.cuda.Event | None  # recorded after the copy; None on a CPU

    def tokens(self) -> list[int]:
        if self.event is not None:
            self.event.synchronize()
        return self.host.tolist()


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        """`config` as `minisgl.config.resolve_config` checked it; nothing is checked again here."""
        tp = config.tp_info
        self.model_path = Path(config.model_path)
        self.model_config = ModelConfig.from_dir(self.model_path).with_moe_parallel(config.moe_parallel)
        self.stage = PipelineStage.of(config.pp_info.rank, config.pp_info.size, self.model_config.num_layers,
                                      self.model_config.tie_word_embeddings)
        self.device = _bind_device(config)
        with TRACE.span("join the group", "process", backend=config.dist_backend):
            self.groups = join(tp, config.dist_init_addr, self.device, config.dist_backend, pp=config.pp_info,
                               local_ranks=config.local_world_size, all_to_all=config.moe_parallel == "ep",
                               timeout_s=config.dist_timeout_s)  # sets the TP info every layer reads
        # dtype "auto" is measured where the engine runs, once: every rank takes world rank 0's choice
        self.config = config = _same_on_every_rank(resolve_precision(config) if config.world_rank == 0 else config,
                                                   self.groups.world)
        self.dtype = resolve_dtype(config.dtype)
        self.kv_dtype = resolve_dtype(config.kv_cache_dtype)  # the model's dtype, or bf16 under fp32 (CPU)
        COMM_COUNTER.configure(counting=config.comm_stats_dir is not None)

        with TRACE.span("load weights", "process"):
            with torch.device("meta"):  # shapes only; real tensors arrive from the loader
                self.model = create_model(self.model_config, self.stage)
            self._load_weights()
            self._plug_in()
        with TRACE.span("size the KV cache", "process"):
            num_pages = self._sync_num_pages()

        self.kv_pool = KVCachePool(
            len(self.stage.layers),  # this stage's layers only
            num_pages,
            config.page_size,
            local_kv_heads(self.model_config.num_kv_heads, tp.size),
            self.model_config.head_dim,
            self.kv_dtype,
            self.device,
        )
        self.config = config = with_batch_limits(config, self.kv_pool.num_slots)  # limits left to the device
        self.attn_backend = create_attention_backend(
            config.attention_backend, self.kv_pool, self.device,
            self.model_config.max_position_embeddings, config.max_running_requests,
            local_q_heads=self.model_config.num_heads // tp.size, batch_invariant=config.deterministic,
        )
        self.overlap = config.overlap_schedule if config.overlap_schedule is not None else self.device.type == "cuda"
        self.overlap = self.overlap and self.stage.size == 1  # a pipeline keeps several batches in flight instead
        # the last step's greedy tokens, which fill the next step's placeholders (placeholders.py)
        self._future_tokens = torch.zeros(2 * config.max_running_requests, dtype=torch.int64, device=self.device)
        self.graph_runner = self._init_cuda_graphs()
        on_cpu = self.device.type == "cpu"
        self.cpu_graphs = cpu.cpu_graph_runner(self.model, self.attn_backend, config) if on_cpu else None

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

    def _sync_num_pages(self) -> int:
        """Pages every rank can afford; the minimum over ranks, so all ranks admit the same requests."""
        config, model = self.config, self.model_config
        page_bytes = config.page_size * KVCachePool.bytes_per_token(
            len(self.stage.layers), local_kv_heads(model.num_kv_heads, config.tp_info.size), model.head_dim,
            self.kv_dtype)
        if config.num_pages is not None:
            num_pages = config.num_pages
        else:
            budget = config.kv_memory_gb * (1 << 30) if config.kv_memory_gb else self._default_kv_budget()
            num_pages = int(budget // page_bytes)
        if self.groups.world is not None:  # every stage too: they mirror one scheduler
            num_pages = min_over_ranks(num_pages, self.groups.world)
        return num_pages

    def _default_kv_budget(self) -> float:
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            # local ranks r, r + count, ... share GPU r: the busiest GPU hosts ceil(ranks / count)
            ranks_here = -(-self.config.local_world_size // max(1, torch.cuda.device_count()))
            return 0.85 * free / ranks_here
        return min(0.2 * available_host_memory() / self.config.local_world_size, _CPU_KV_BUDGET_CAP)

    def _init_cuda_graphs(self) -> CudaGraphRunner | None:
        config = self.config
        max_bs = config.cuda_graph_max_bs
        if max_bs is None:
            max_bs = min(config.max_running_requests, _MAX_GRAPH_BS)
        if max_bs <= 0 or self.device.type != "cuda":
            return None
        if self.stage.size > 1:
            logger.warning("pipeline stages run decode eagerly (no CUDA graphs)")
            return None
        if COMM_COUNTER.counting:
            logger.warning("counting collectives (--comm-stats-dir): decode runs eagerly, graph replays run no Python")
            return None
        if self.config.moe_parallel == "ep" and self.config.tp_info.size > 1:
            logger.warning("expert parallelism sizes its all-to-all from each step's routing on the host; "
                           "running decode eagerly")
            return None
        if not self.attn_backend.supports_cuda_graph:
            logger.warning("CUDA graphs need the triton or flashinfer attention backend; running decode eagerly")
            return None
        if self.config.tp_info.size > 1 and self.groups.backend == "gloo":
            logger.warning("gloo collectives cannot be captured in a CUDA graph; running decode eagerly")
            return None
        with torch.inference_mode():
            return CudaGraphRunner(self.model, self.attn_backend, max_bs, self.device, self._future_tokens)

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
        if self.device.type != "cuda":
            return TokenFuture(tokens, None)
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return TokenFuture(host, event)

    @torch.inference_mode()
    def forward_logits(self, batch: Batch) -> torch.Tensor:
        """Logits [num_reqs, vocab] of each request's last new token. `batch` may live on the CPU:
        its tensors move to the device without a host-device sync."""
        if self.graph_runner is not None and self.graph_runner.fits(batch):
            return self.graph_runner.run(batch)[0]
        return self._forward_on_host(batch)

    def _forward_on_host(self, batch: Batch) -> torch.Tensor:
        """A step the host launches: a CPU graph's replay where one fits (or is recorded by this
        very step), else the eager forward."""
        if self.cpu_graphs is not None and self.cpu_graphs.fits(batch):
            if self.overlap:  # placeholder ids -(i + 1) become token i of the previous step, in place
                resolve_placeholders(batch.input_ids, self._future_tokens)
            logits = self.cpu_graphs.run(batch)
            if logits is not None:
                return logits
        return self._forward_eager(batch)

    def _forward_eager(self, batch: Batch) -> torch.Tensor:
        batch = self._to_device(batch)
        # placeholder ids -(i + 1) become token i of the previous step, in place, on the device (a
        # CUDA graph does this itself, as its first kernel)
        resolve_placeholders(batch.input_ids, self._future_tokens)
        self.attn_backend.prepare(batch)
        counted = COMM_COUNTER.forward(batch.phase, batch.num_tokens, self.device)  # a no-op unless counting
        with forward_context(batch, self.attn_backend), counted:
            return self.model.forward(batch)

    @torch.inference_mode()
    def forward_stage(self, batch: Batch) -> list[int] | None:
        """This pipeline stage's part of `batch` (chapter 13): take the previous stage's activations
        (the first stage embeds the tokens instead), run this stage's layers, and hand the result on;
        the last stage samples and returns the tokens."""
        batch = self._to_device(batch)
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

    def _to_device(self, batch: Batch) -> Batch:
        if batch.input_ids.device == self.device:
            return batch
        # one packed copy: [ids | positions | out slots | last indices]
        parts = [batch.input_ids, batch.positions, batch.out_slots, batch.last_indices]
        packed = torch.cat(parts)
        if self.device.type == "cuda":
            packed = packed.pin_memory().to(self.device, non_blocking=True)
        else:
            packed = packed.to(self.device)
        ids, positions, slots, last = packed.split([p.numel() for p in parts])
        return dataclasses.replace(batch, input_ids=ids, positions=positions, out_slots=slots, last_indices=last)

    def release(self, req: Req) -> None:
        """`req` finished: drop per-request state in the attention backend (its page-table row)."""
        self.attn_backend.release(req)

    def shutdown(self) -> None:
        if COMM_COUNTER.counting:
            self._write_comm_stats()
        if self.graph_runner is not None:
            self.graph_runner.destroy()  # graphs hold captured collectives: before the communicators
            self.graph_runner = None
        if self.stage.size > 1:
            wait_for_sends()  # the next stage may still be reading them
        destroy_distributed()

    def _write_comm_stats(self) -> None:
        """What the communication counter saw on this rank, as `comm-tp{rank}.json` in `comm_stats_dir`
        (`comm-dp{replica}-tp{rank}.json` with data parallelism, `comm-pp{stage}-tp{rank}.json` with
        pipeline stages)."""
        config, tp, pp = self.config, self.config.tp_info, self.config.pp_info
        replica = f"dp{config.dp_rank}-" if config.dp_size > 1 else ""
        stage = f"pp{pp.rank}-" if pp.size > 1 else ""
        COMM_COUNTER.write(Path(config.comm_stats_dir) / f"comm-{replica}{stage}tp{tp.rank}.json",
                           tp_rank=tp.rank, tp_size=tp.size, dp_rank=config.dp_rank, dp_size=config.dp_size,
                           pp_rank=pp.rank, pp_size=pp.size, dist_backend=self.groups.backend, device=str(self.device))


def available_host_memory(meminfo: Path = Path("/proc/meminfo")) -> int:
    """Bytes this machine can hand out now: Linux's MemAvailable, which counts the page cache and the
    other memory the kernel can reclaim. Free pages alone (the fallback where there is no MemAvailable)
    can be a small part of it: after a few GB of files were read, 16 of 24 GB sat in the page cache
    and a KV pool sized from free pages could no longer hold one 8,192-token request."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # the file counts kB
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def resolve_dtype(name: str) -> torch.dtype:
    """The torch dtype of a dtype name ("auto" is resolved before, by `resolve_precision`)."""
    dtypes = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
              "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if name not in dtypes:
        raise ValueError(f"unknown dtype {name!r}; use auto, float32, bfloat16 or float16")
    return dtypes[name]


def _same_on_every_rank(config: EngineConfig, world: dist.ProcessGroup | None) -> EngineConfig:
    """`config` with world rank 0's precision: ranks that chose apart could not add their partial sums."""
    if world is None:
        return config
    names = ("dtype", "matmul_dtype", "kv_cache_dtype", "quantization", "max_quantized_rows")
    return dataclasses.replace(config, **broadcast_json({n: getattr(config, n) for n in names}, world))


def _bind_device(config: EngineConfig) -> torch.device:
    if config.device == "cuda":
        # several ranks may share one GPU (gloo only): local rank r -> GPU r mod count
        device = torch.device(f"cuda:{config.local_rank % torch.cuda.device_count()}")
        torch.cuda.set_device(device)
        return device
    torch.set_num_threads(config.rank_cpu_threads)
    return torch.device("cpu")
