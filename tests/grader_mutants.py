"""Mutants of solutions/ for the grader's self-test (tests/test_grader.py): each is a copy of the
reference answers with one common mistake, made by replacing exact snippets of one solution file,
and names the graded test that must catch it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # under solutions/
    patches: tuple[tuple[str, str], ...]  # (snippet that occurs once, replacement)
    caught_by: str  # a graded test function that must fail on this mutant
    mistake: str

    @property
    def chapter(self) -> str:
        return self.file[2:4]


F = "torch.nn.functional"
ROW_RETURN = "    return layer.forward(x_local)  # [tokens, out], all-reduced"
EMBED_RETURN = "    return embedding.forward(input_ids)  # [tokens, hidden], all-reduced"
HEAD_RETURN = "    return lm_head.forward(hidden_states)  # [n, vocab_size], gathered and trimmed"
CH05_IMPORT = ("from minisgl.layers import ParallelLMHead, VocabParallelEmbedding",
               "from minisgl.layers import ParallelLMHead, VocabParallelEmbedding\n"
               "from minisgl.distributed import all_gather, all_reduce")
WAIT = "        wait_for_acks(dict(enumerate(processes)), acks, timeout_s)  # the ranks ack with their rank as key"
CH06_COUNT = "    count = broadcast_count(len(pulled), io.cpu_group)  # gloo, from rank 0: every rank, every step"
# The reference delegates to the engine's minisgl.models.weight.shard_and_merge; these mutants
# replace that call with a hand-written loop carrying one mistake.
DELEGATE = "    return weight.shard_and_merge(tensors, config, rank, tp_size)\n"
SHARD_LINE = "        local = shard_tensor(name, full, rank, tp_size, config)\n"
PLAIN_YIELD = "            yield name, local\n"
FUSED_YIELD = "            yield fused, torch.cat([parts[i] for i in range(len(parts))], dim=0)\n"
MERGE_LOOP = (
    "    merge_buffer = {}\n"
    "    for name, full in tensors:\n"
    "        if \"rotary_emb\" in name or (config.tie_word_embeddings and name.startswith(\"lm_head.\")):\n"
    "            continue\n"
    + SHARD_LINE
    + "        merge = weight.merged_name(name)\n"
    "        if merge is None:\n"
    + PLAIN_YIELD
    + "            continue\n"
    "        fused, slot = merge\n"
    "        parts = merge_buffer.setdefault(fused, {})\n"
    "        parts[slot] = local\n"
    "        if len(parts) == weight.MERGE_SIZES[fused.split(\".\")[-2]]:\n"
    "            del merge_buffer[fused]\n"
    + FUSED_YIELD
)

MUTANTS = [
    Mutant("rank-sum-no-all-reduce", "ch00_getting_started.py",
           (("return int(all_reduce(mine).item())", "return int(mine.item())"),),
           "test_rank_sum", "returns its own rank instead of the sum"),
    Mutant("column-split-wrong-dim", "ch01_tp_first_principles.py",
           (("weight.chunk(tp.size, dim=0)[tp.rank]  # [out / tp, in]", "weight.chunk(tp.size, dim=1)[tp.rank]"),),
           "test_column_forward", "column-parallel weight split on dim 1"),
    Mutant("row-no-all-reduce", "ch01_tp_first_principles.py",
           ((ROW_RETURN, f"    return {F}.linear(x_local, layer.weight, layer.bias)"),),
           "test_row_forward", "row-parallel forward without the all-reduce"),
    Mutant("row-bias-before-all-reduce", "ch01_tp_first_principles.py",
           (("from minisgl.distributed import get_tp_info", "from minisgl.distributed import all_reduce, get_tp_info"),
            (ROW_RETURN, f"    return all_reduce({F}.linear(x_local, layer.weight, layer.bias))")),
           "test_row_forward", "bias added on every rank before the all-reduce"),
    Mutant("acks-not-awaited", "ch02_launch.py", ((WAIT, "        pass"),),
           "test_waits_for_every_ack", "returns without waiting for the acks"),
    Mutant("acks-wrong-count", "ch02_launch.py",
           ((WAIT, "        for _ in range(world_size - 1):\n            acks.get(timeout=timeout_s)"),),
           "test_waits_for_every_ack", "waits for world_size - 1 acks"),
    Mutant("no-cleanup-on-failure", "ch02_launch.py",
           (("        stop_processes(processes)  # terminate every rank (then kill): no orphans", "        pass"),),
           "test_timeout_names_missing_rank", "raises but leaves the other ranks running"),
    Mutant("unique-id-wrong-root", "ch03_communication_init.py",
           (("src=dist.get_global_rank(cpu_group, 0)", "src=dist.get_global_rank(cpu_group, dist.get_world_size(cpu_group) - 1)"),),
           "test_unique_id_broadcast", "broadcasts the id from the last rank"),
    Mutant("unique-id-made-everywhere", "ch03_communication_init.py",
           (("    if dist.get_rank(cpu_group) == 0:", "    if True:  # every rank asks NCCL"),),
           "test_unique_id_broadcast", "every rank calls ncclGetUniqueId"),
    Mutant("kv-heads-round-robin", "ch04_weight_sharding.py",
           (("    return kv_head_offset(rank, num_kv_heads, tp_size), local_kv_heads(num_kv_heads, tp_size)",
             "    first = rank % num_kv_heads if num_kv_heads < tp_size else kv_head_offset(rank, num_kv_heads, tp_size)\n"
             "    return first, local_kv_heads(num_kv_heads, tp_size)"),),
           "test_shard_qkv", "replicated KV heads dealt round-robin to the wrong ranks"),
    Mutant("row-weight-split-dim-0", "ch04_weight_sharding.py",
           (("    return weight.shard_tensor(name, tensor, rank, tp_size, config)",
             "    if name.endswith((\"o_proj.weight\", \"down_proj.weight\")):\n"
             "        return tensor.chunk(tp_size, dim=0)[rank].clone()\n"
             "    return weight.shard_tensor(name, tensor, rank, tp_size, config)"),),
           "test_shard_rules", "row-parallel weights split on the output dim"),
    Mutant("merge-before-shard", "ch04_weight_sharding.py",
           ((DELEGATE, MERGE_LOOP.replace(SHARD_LINE, "        local = full\n").replace(
               FUSED_YIELD, "            yield fused, torch.cat([parts[i] for i in range(len(parts))], dim=0)"
                            ".chunk(tp_size, dim=0)[rank].clone()\n").replace(
               PLAIN_YIELD, "            yield name, shard_tensor(name, full, rank, tp_size, config)\n")),),
           "test_shard_and_merge", "fuses the full q/k/v first, then splits the fused tensor evenly"),
    Mutant("merge-in-arrival-order", "ch04_weight_sharding.py",
           ((DELEGATE, MERGE_LOOP.replace(
               FUSED_YIELD, "            yield fused, torch.cat(list(parts.values()), dim=0)\n")),),
           "test_shard_and_merge", "concatenates the parts in the order they arrive"),
    Mutant("vocab-mask-off-by-one", "ch05_vocab_parallelism.py",
           (CH05_IMPORT,
            (EMBED_RETURN,
             "    mine = (input_ids > embedding.vocab_start) & (input_ids < embedding.vocab_end)\n"
             "    local_ids = torch.where(mine, input_ids - embedding.vocab_start, 0)\n"
             f"    return all_reduce({F}.embedding(local_ids, weight_shard) * mine.unsqueeze(-1))")),
           "test_vocab_embedding", "a shard's first id is treated as foreign (> instead of >=)"),
    Mutant("lm-head-padding-kept", "ch05_vocab_parallelism.py",
           (CH05_IMPORT,
            (HEAD_RETURN,
             f"    local = {F}.linear(hidden_states, weight_shard)  # [n, shard]\n"
             "    n = hidden_states.shape[0]\n"
             "    return all_gather(local).view(-1, n, local.shape[1]).transpose(0, 1).reshape(n, -1)")),
           "test_lm_head", "the padding columns are not trimmed"),
    Mutant("lm-head-rank-major", "ch05_vocab_parallelism.py",
           (CH05_IMPORT,
            (HEAD_RETURN,
             f"    local = {F}.linear(hidden_states, weight_shard)  # [n, shard]\n"
             "    return all_gather(local).reshape(hidden_states.shape[0], -1)[:, :vocab_size]")),
           "test_lm_head", "the gathered [tp * n, shard] blocks are reshaped without reordering"),
    Mutant("count-from-wrong-rank", "ch06_rank0_broadcast.py",
           ((CH06_COUNT,
             "    import torch\n    import torch.distributed as dist\n"
             "    counts = torch.tensor([len(pulled)], dtype=torch.int64)\n"
             "    dist.broadcast(counts, src=io.tp_info.size - 1, group=io.cpu_group)\n"
             "    count = int(counts.item())"),),
           "test_receive_step", "broadcasts the count from the last rank"),
    Mutant("empty-step-skipped", "ch06_rank0_broadcast.py",
           ((CH06_COUNT,
             "    count = broadcast_count(len(pulled), io.cpu_group) if pulled or not io.tp_info.is_primary else 0"),),
           "test_receive_step", "rank 0 skips the count when it has nothing (the others hang)"),
    Mutant("mlp-merge-before-shard", "ch07_tp_decoder_layer.py",
           (("torch.cat([gate.chunk(tp.size, dim=0)[tp.rank], up.chunk(tp.size, dim=0)[tp.rank]])",
             "torch.cat([gate, up]).chunk(tp.size, dim=0)[tp.rank]"),),
           "test_tp_mlp", "gate_up fused before sharding"),
    Mutant("kv-heads-not-replicated", "ch07_tp_decoder_layer.py",
           (("kv_heads = local_kv_heads(config.num_kv_heads, tp_size)", "kv_heads = config.num_kv_heads // tp_size"),),
           "test_local_shapes", "num_kv_heads // tp, which is 0 when tp > num_kv_heads"),
    Mutant("ring-factor-one-pass", "ch09_communication_volume.py",
           (("    return 2 * (tp_size - 1) / tp_size", "    return (tp_size - 1) / tp_size"),),
           "test_ring_factor", "ring factor (t - 1) / t instead of 2 (t - 1) / t"),
    Mutant("count-forgets-embedding", "ch09_communication_volume.py",
           (('    return 2 * hf_config["num_hidden_layers"] + 1', '    return 2 * hf_config["num_hidden_layers"]'),),
           "test_all_reduces_per_forward", "2 * layers, forgetting the embedding's all-reduce"),
]
