"""Mutants of solutions/ for the grader's self-test (tests/test_grader.py): each is a copy of the
reference answers with one realistic mistake, made by replacing exact snippets of one solution
file, and names the graded test that must catch it. Together they cover every clause of every
task's contract (values, dtypes, untouched inputs, fresh storage, the taught collective on the
given group, documented errors, timing from the start, the engine's own code off limits).
Instructor material: a student release leaves this file out."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str  # unique, and no name is part of another (the self-test selects tests by it)
    file: str  # under solutions/
    patches: tuple[tuple[str, str], ...]  # (snippet that occurs once, replacement)
    caught_by: str  # a graded test function that must fail on this mutant
    mistake: str
    graded_on: str = ""  # the chapter it is graded on, if not its file's (the capstone: "15")
    world_size: int = 2  # the one clause a group of 2 cannot show needs 4
    needs_gpu: bool = False  # a device clause: every tensor is on the CPU without a GPU, so only a GPU run shows it

    @property
    def chapter(self) -> str:
        return self.graded_on or self.file[2:4]


CH00, CH01, CH02 = "ch00_getting_started.py", "ch01_tp_first_principles.py", "ch02_launch.py"
CH03, CH04 = "ch03_communication_init.py", "ch04_weight_sharding.py"
CH05, CH06 = "ch05_vocab_parallelism.py", "ch06_rank0_broadcast.py"
CH07, CH09 = "ch07_tp_decoder_layer.py", "ch09_communication_volume.py"
CH11, CH12, CH13 = "ch11_kv_memory.py", "ch12_beyond_one_machine.py", "ch13_pipeline_parallelism.py"
STAGE_SIZE = "        size = base + 1 if stage < extra else base  # the first `extra` stages take one more"
EMPTY_STAGE_CHECK = "    if pp_size > num_layers:"
TIED_RETURN = "        return sorted({0, last}) if tie_word_embeddings else [0]"
LAYER_CHECK = "        if not 0 <= layer < num_layers:"
UNKNOWN_NAME = '    raise ValueError(f"{name!r} is not a Llama checkpoint tensor")'
CH14 = "ch14_experts_across_ranks.py"
F = "torch.nn.functional"
DIST = "torch.distributed"

RANK_SUM = "    return int(all_reduce(mine).item())"
COLUMN_RETURN = ("    return F.linear(x, weight_shard, bias_shard)"
                 "  # [tokens, out / tp]: whole dot products, no communication")
COLUMN_CHECK = '    _check_shapes(x, weight_shard, bias_shard, "column_parallel_forward")\n'
ROW_SUM = ("    output = all_reduce(partial)\n"
           "    return output if bias is None else output + bias  # once, after the sum")
ROW_IMPORT = ("from minisgl.distributed import all_reduce",
              "import torch.distributed as dist\n\nfrom minisgl.distributed import all_reduce")
DEAD_CHECK = ("            if dead:\n                raise RuntimeError(f\"rank {dead[0]} exited with code "
              "{processes[dead[0]].exitcode} before it acked\")\n")
BROADCAST_ID = "dist.broadcast(id_bytes, src=dist.get_global_rank(cpu_group, 0), group=cpu_group)"
KV_RETURN = "        return rank // (tp_size // num_kv_heads), 1"
COLUMN_SHARD = "        return tensor[rank * size:(rank + 1) * size].clone()"
SHARD_LOCAL = ("        local = shard_tensor(name, full, rank, tp_size, config)\n"
               "        del full  # only the shard stays alive\n")
FUSED_YIELD = ("            yield fused, torch.cat([group[i] for i in range(parts)], dim=0)"
               "  # slot order, not arrival order")
ARRIVAL_YIELD = "            yield fused, torch.cat(list(group.values()), dim=0)"
HEAD_ORDER = ("    logits = gathered.view(tp, n, shard_size).transpose(0, 1).reshape(n, tp * shard_size)"
              "  # shards side by side")
EMBED_MASK = "    mine = (input_ids >= start) & (input_ids < start + shard_size)  # [tokens]"
EMBED_IDS = "    local_ids = torch.where(mine, input_ids - start, 0)  # foreign ids read row 0, then get zeroed"
SHARD_CHECK_EMBED = '    shard_size = _shard_size(weight_shard, vocab_size, "vocab_parallel_embedding")'
HEAD_GATHER = "    gathered = all_gather(local)  # [tp * n, shard_size], rank-major"
HEAD_TRIM = "    return logits[:, :vocab_size]  # drop the padding columns"
LAYOUT_BLOCK = "    ranks = range(node_rank * per_node, (node_rank + 1) * per_node)  # this node's contiguous block"
LAYOUT_ORDER = "    processes = [(replica, rank) for replica in range(dp_size) for rank in ranks]  # replica after replica"
LAYOUT_RETURN = "    return [(replica, rank, local % gpus_per_node) for local, (replica, rank) in enumerate(processes)]"
DP_CHECK = ("    if dp_size > 1 and nnodes > 1:\n"
            "        raise ValueError(f\"dp_size={dp_size} runs its replicas on one machine, but nnodes={nnodes}\")\n")
ROUND_ROBIN = "        return num_sent % len(loads)"
LEAST_LOAD = "    return next(i for i, load in enumerate(loads) if load == smallest)  # the first of equals"
POLICY_CHECK = "    if policy not in POLICIES:"
COUNT_BROADCAST = "    count = broadcast_count(len(pulled), io.cpu_group)  # every rank, every step, even when it is 0"


LAST_OF_GROUP = "dist.get_global_rank(io.cpu_group, dist.get_world_size(io.cpu_group) - 1)"


def hand_count(src: str) -> str:
    """The count broadcast written with torch.distributed, from global rank `src`."""
    return ("    import torch\n    import torch.distributed as dist\n"
            "    counts = torch.tensor([len(pulled)], dtype=torch.int64)\n"
            f"    dist.broadcast(counts, src={src}, group=io.cpu_group)\n"
            "    count = int(counts.item())")
MLP_GATE_UP = "    gate_up = torch.cat([gate[rows], up[rows]])  # [2 * intermediate / tp, hidden]: shard, then fuse"
MLP_CHECK = ('    if intermediate % tp.size != 0:\n        raise ValueError(f"tp_size={tp.size} does not divide '
             'intermediate_size={intermediate}")\n')

MATCH_WHOLE = "        whole = common_prefix_len(child.key, token_ids[pos:]) // size  # pages of this edge that match"
MATCH_TAKE = ("        pages += child.pages[:whole]\n        if whole * size < len(child.key):\n"
              "            break  # the match ends inside this edge\n")
MATCH_STAMP = "        child.last_access = tree.clock\n"
LEAF_ENTRY = "            leaves.append((node.last_access, node.id, node))"
PARENT_PUSH = ("        if parent is not tree.root and not parent.children and parent.lock_ref == 0:\n"
               "            heapq.heappush(leaves, (parent.last_access, parent.id, parent))\n")
EVICT_LOOP = "    while len(freed) < num_pages and leaves:"

PLAN_KEY = "    key = ranks * num_experts + experts  # by rank, then by expert inside the rank"
PLAN_SORT = "    send_order = torch.sort(key, stable=True).indices  # stable: ties keep pair order"
PLAN_INVERSE = ("    inverse = torch.empty_like(send_order)\n"
                "    inverse[send_order] = torch.arange(send_order.numel(), device=send_order.device)\n")
PLAN_COUNTS = "    rank_counts = torch.bincount(ranks, minlength=num_ranks)"
PLAN_ID_CHECK = "    if experts.numel() and (int(experts.min()) < 0 or int(experts.max()) >= num_experts):"

MUTANTS = [
    # ---- chapter 00 -------------------------------------------------------------------------
    Mutant("rank-sum-no-all-reduce", CH00, ((RANK_SUM, "    return int(mine.item())"),),
           "test_rank_sum", "returns its own rank instead of the sum"),
    Mutant("rank-sum-tensor", CH00, ((RANK_SUM, "    return all_reduce(mine)"),),
           "test_rank_sum", "returns the tensor, not an int"),
    Mutant("rank-sum-bypasses-seam", CH00,
           ((RANK_SUM, f"    import {DIST}\n    {DIST}.all_reduce(mine)\n    return int(mine.item())"),),
           "test_rank_sum", "calls torch.distributed.all_reduce directly: the seam never sees it"),
    Mutant("rank-sum-skips-tp1", CH00,
           ((RANK_SUM, "    if get_tp_info().size == 1:\n        return 0  # alone: nothing to add\n" + RANK_SUM),),
           "test_rank_sum", "skips the all-reduce at tp = 1, where the contract still wants the one call"),
    Mutant("rank-sum-on-cpu", CH00, ((", device=device)  # [1]", ")  # [1]"),),
           "test_rank_sum", "sums a CPU tensor whatever device the rank was given", needs_gpu=True),
    # ---- chapter 01 -------------------------------------------------------------------------
    Mutant("column-bias-dropped", CH01, ((COLUMN_RETURN, "    return F.linear(x, weight_shard)"),),
           "test_column_forward", "forgets the bias"),
    Mutant("column-fp32-out", CH01, ((COLUMN_RETURN, "    return F.linear(x.float(), weight_shard.float(), "
                                      "None if bias_shard is None else bias_shard.float())"),),
           "test_column_forward", "computes (and returns) fp32 whatever the input dtype"),
    Mutant("column-all-reduced", CH01,
           (("import torch.nn.functional as F\n",
             "import torch.nn.functional as F\n\nfrom minisgl.distributed import all_reduce as _sum\n"),
            (COLUMN_RETURN, "    return _sum(F.linear(x, weight_shard, bias_shard))")),
           "test_column_forward", "adds the column slices over the ranks, as if it were row parallel"),
    Mutant("column-no-shape-check", CH01, ((COLUMN_CHECK, ""),),
           "test_column_forward_rejects_mismatched_shapes", "lets F.linear fail with a RuntimeError"),
    Mutant("row-no-all-reduce", CH01, ((ROW_SUM, "    return partial if bias is None else partial + bias"),),
           "test_row_forward", "row-parallel forward without the all-reduce"),
    Mutant("row-bias-before-sum", CH01,
           ((ROW_SUM, "    return all_reduce(partial if bias is None else partial + bias)"),),
           "test_row_forward", "bias added on every rank before the all-reduce"),
    Mutant("row-bias-in-place", CH01,
           (("from minisgl.distributed import all_reduce", "from minisgl.distributed import all_reduce, get_tp_info"),
            (ROW_SUM, "    if bias is not None:\n"
                      "        partial = partial + bias.div_(get_tp_info().size)  # a share each\n"
                      "    return all_reduce(partial)")),
           "test_row_forward", "adds bias / tp on every rank, dividing the caller's bias in place"),
    Mutant("row-direct-all-reduce", CH01,
           (ROW_IMPORT,
            (ROW_SUM, "    dist.all_reduce(partial)\n    return partial if bias is None else partial + bias")),
           "test_row_forward", "calls torch.distributed.all_reduce directly, around the seam"),
    Mutant("row-engine-layer", CH01,
           ((ROW_SUM, "    from minisgl.layers import RowParallelLinear\n"
                      "    layer = RowParallelLinear.__new__(RowParallelLinear)  # no constructor: sizes are given\n"
                      "    layer.weight, layer.bias = weight_shard, bias\n    return layer.forward(x_local)"),),
           "test_row_forward", "delegates to the engine's RowParallelLinear"),
    Mutant("column-transposes-in-place", CH01,
           ((COLUMN_RETURN, "    return F.linear(x, weight_shard.t_().t(), bias_shard)  # turns the caller's tensor"),),
           "test_column_forward", "transposes the caller's weight shard in place (and back, as a view)"),
    Mutant("column-no-bias-check", CH01,
           (("    if bias is not None and bias.shape != (weight.shape[0],):", "    if False:"),),
           "test_column_forward_rejects_mismatched_shapes", "a bias of the wrong size reaches F.linear (RuntimeError)"),
    Mutant("row-fp32-out", CH01, ((ROW_SUM, "    output = all_reduce(partial)\n"
                                            "    return (output if bias is None else output + bias).float()"),),
           "test_row_forward", "returns fp32 whatever the input dtype"),
    Mutant("row-check-after-all-reduce", CH01,
           (('    _check_shapes(x_local, weight_shard, bias, "row_parallel_forward")\n', ""),
            ("    output = all_reduce(partial)\n",
             '    output = all_reduce(partial)\n'
             '    _check_shapes(x_local, weight_shard, bias, "row_parallel_forward")\n')),
           "test_row_forward_rejects_mismatched_shapes", "checks the bias after the all-reduce it joined"),
    # ---- chapter 02 -------------------------------------------------------------------------
    Mutant("acks-not-awaited", CH02, (("        _wait_for_acks(processes, acks, deadline, timeout_s)\n", ""),),
           "test_waits_for_every_ack", "returns without waiting for the acks"),
    Mutant("acks-one-short", CH02,
           (("    while len(ready) < len(processes):", "    while len(ready) < len(processes) - 1:"),),
           "test_waits_for_every_ack", "waits for world_size - 1 acks"),
    Mutant("launch-forks", CH02, (('    ctx = mp.get_context("spawn")', '    ctx = mp.get_context("fork")'),),
           "test_waits_for_every_ack", "forks the ranks (they inherit the launcher's torch, CUDA and ZMQ state)"),
    Mutant("no-cleanup-on-failure", CH02, (("        _stop(processes)\n", ""),),
           "test_error_ack_is_reported", "raises but leaves the other ranks running"),
    Mutant("timeout-per-ack", CH02,
           (("        ready.add(rank)", "        ready.add(rank)\n        deadline = time.monotonic() + timeout_s"),),
           "test_timeout_counts_from_the_start", "restarts the timeout at every ack"),
    Mutant("dead-rank-ignored", CH02, ((DEAD_CHECK, ""),),
           "test_dead_rank_is_noticed", "notices a dead rank only at the deadline"),
    Mutant("error-detail-dropped", CH02,
           (('            raise RuntimeError(f"rank {rank} failed to start: {detail}")',
             '            raise RuntimeError(f"rank {rank} failed to start")'),),
           "test_error_ack_is_reported", "reports a failed rank without its own detail"),
    Mutant("launch-args-unchecked", CH02, (("    if world_size < 1 or timeout_s <= 0:", "    if False:"),),
           "test_rejects_bad_arguments", "starts nothing for world_size 0 and returns, instead of ValueError"),
    Mutant("launch-returns-in-ack-order", CH02,
           (("        ready.add(rank)", "        ready.add(rank)\n        ACKED.append(rank)"),
            ("    ready: set[int] = set()\n", "    ready: set[int] = set()\n    ACKED.clear()\n"),
            ("    return processes\n", "    return [processes[rank] for rank in ACKED]\n\n\nACKED: list[int] = []\n")),
           "test_waits_for_every_ack", "returns the processes in the order they acked, not rank order"),
    Mutant("error-ack-unnamed", CH02,
           (('            raise RuntimeError(f"rank {rank} failed to start: {detail}")',
             '            raise RuntimeError(f"a rank failed to start: {detail}")'),),
           "test_error_ack_is_reported", "reports a rank's error without saying which rank"),
    Mutant("dead-rank-unnamed", CH02,
           (('raise RuntimeError(f"rank {dead[0]} exited with code {processes[dead[0]].exitcode} before it acked")',
             'raise RuntimeError("a rank exited before it acked")'),),
           "test_dead_rank_is_noticed", "notices the dead rank but does not say which"),
    Mutant("timeout-names-acked", CH02,
           (('                missing = sorted(set(range(len(processes))) - ready)\n'
             '                raise RuntimeError(f"ranks {missing} did not ack within {timeout_s:g} s") from None',
             '                raise RuntimeError(f"timed out after {timeout_s:g} s; ready: {sorted(ready)}") '
             'from None'),),
           "test_timeout_counts_from_the_start", "the timeout error lists the ranks that acked, not the others"),
    Mutant("launch-checks-late", CH02,
           (("    if world_size < 1 or timeout_s <= 0:\n"
             '        raise ValueError(f"start_ranks needs world_size >= 1 and timeout_s > 0, got {world_size} and '
             '{timeout_s}")\n', ""),
            ("        _wait_for_acks(processes, acks, deadline, timeout_s)\n",
             "        if world_size < 1 or timeout_s <= 0:\n"
             "            raise ValueError(f\"bad arguments {world_size}, {timeout_s}\")\n"
             "        _wait_for_acks(processes, acks, deadline, timeout_s)\n")),
           "test_rejects_bad_arguments", "checks its arguments only after it started the ranks"),
    # ---- chapter 03 -------------------------------------------------------------------------
    Mutant("unique-id-wrong-root", CH03,
           ((BROADCAST_ID, "last = dist.get_world_size(cpu_group) - 1\n"
                           "    dist.broadcast(id_bytes, src=dist.get_global_rank(cpu_group, last), "
                           "group=cpu_group)"),),
           "test_unique_id_broadcast", "broadcasts the id from the group's last rank"),
    Mutant("unique-id-made-everywhere", CH03, (("    if dist.get_rank(cpu_group) == 0:", "    if True:"),),
           "test_unique_id_broadcast", "every rank calls ncclGetUniqueId"),
    Mutant("unique-id-global-root", CH03, ((BROADCAST_ID, "dist.broadcast(id_bytes, src=0, group=cpu_group)"),),
           "test_unique_id_broadcast", "takes src=0, global rank 0, which the group may not contain"),
    Mutant("unique-id-default-group", CH03,
           ((BROADCAST_ID, "dist.broadcast(id_bytes, src=dist.get_global_rank(cpu_group, 0))"),),
           "test_unique_id_broadcast", "broadcasts on the default group instead of the one given"),
    Mutant("unique-id-global-rank-test", CH03,
           (("    if dist.get_rank(cpu_group) == 0:", "    if dist.get_rank() == 0:"),),
           "test_unique_id_broadcast", "asks whether it is global rank 0, not the group's rank 0"),
    Mutant("unique-id-skips-single", CH03,
           (("    if dist.get_rank(cpu_group) == 0:", "    if dist.get_world_size(cpu_group) == 1:\n"
                                                   "        return create_id()  # nobody to tell\n"
                                                   "    if dist.get_rank(cpu_group) == 0:"),),
           "test_unique_id_broadcast", "skips the broadcast in a group of one, where the contract wants it"),
    Mutant("unique-id-bytearray", CH03,
           (("    return bytes(id_bytes.tolist())", "    return bytearray(id_bytes.tolist())"),),
           "test_unique_id_broadcast", "returns a bytearray, not bytes"),
    Mutant("unique-id-root-by-offset", CH03,
           ((BROADCAST_ID, "dist.broadcast(id_bytes, src=dist.get_rank() - dist.get_rank(cpu_group), "
                           "group=cpu_group)"),),
           "test_unique_id_broadcast", "the root's global rank as this rank's minus its group rank: right for "
           "groups of consecutive ranks only, wrong in {1, 3}", world_size=4),
    # ---- chapter 04 -------------------------------------------------------------------------
    Mutant("kv-heads-round-robin", CH04, ((KV_RETURN, "        return rank % num_kv_heads, 1"),),
           "test_shard_qkv", "replicated KV heads dealt round-robin to the wrong ranks"),
    Mutant("kv-heads-never-refused", CH04,
           (('    raise ValueError(f"tp_size={tp_size} neither divides',
             '    return 0, 1\n    raise ValueError(f"tp_size={tp_size} neither divides'),),
           "test_kv_heads_of_rank", "hands out KV head 0 when tp does not fit the KV heads"),
    Mutant("qkv-heads-unchecked", CH04,
           (('    local_heads = _split(num_heads, tp_size, "num_attention_heads")',
             "    local_heads = num_heads // tp_size"),),
           "test_shard_qkv_rejects_what_does_not_split", "shards 8 heads 3 ways without a word"),
    Mutant("row-weight-split-dim-0", CH04,
           (('        size = _split(tensor.shape[1], tp_size, f"dim 1 of {name}")\n'
             "        return tensor[:, rank * size:(rank + 1) * size].clone()",
             '        size = _split(tensor.shape[0], tp_size, f"dim 0 of {name}")\n'
             "        return tensor[rank * size:(rank + 1) * size].clone()"),),
           "test_shard_rules", "row-parallel weights split on the output dim"),
    Mutant("column-shard-is-a-view", CH04, ((COLUMN_SHARD, "        return tensor[rank * size:(rank + 1) * size]"),),
           "test_shard_rules", "returns a view, which keeps the full tensor alive"),
    Mutant("shard-by-chunk", CH04,
           (('        size = _split(tensor.shape[0], tp_size, f"dim 0 of {name}")\n' + COLUMN_SHARD,
             "        return tensor.chunk(tp_size, dim=0)[rank].clone()"),),
           "test_shard_rules_reject_uneven_splits", "chunk() cuts 12 rows 5 ways into uneven shards silently"),
    Mutant("vocab-not-padded", CH04,
           (("        shard = torch.zeros(shard_size, *tensor.shape[1:], dtype=tensor.dtype, device=tensor.device)\n"
             "        shard[:rows.shape[0]] = rows\n        return shard", "        return rows.clone()"),),
           "test_shard_rules", "leaves the last vocab shard short instead of padding it"),
    Mutant("vocab-pad-fp32", CH04,
           (("torch.zeros(shard_size, *tensor.shape[1:], dtype=tensor.dtype, device=tensor.device)",
             "torch.zeros(shard_size, *tensor.shape[1:])"),),
           "test_shard_rules", "pads into a float32 tensor: bf16 checkpoints come back as fp32"),
    Mutant("qkv-merge-before-shard", CH04,
           ((SHARD_LOCAL, "        local = full\n"),
            (FUSED_YIELD, "            whole = torch.cat([group[i] for i in range(parts)], dim=0)\n"
                          "            yield fused, whole.chunk(tp_size, dim=0)[rank].clone()")),
           "test_shard_and_merge", "fuses the full q/k/v first, then splits the fused tensor evenly"),
    Mutant("merge-in-arrival-order", CH04, ((FUSED_YIELD, ARRIVAL_YIELD),),
           "test_shard_and_merge", "concatenates the parts in the order they arrive"),
    Mutant("merge-keeps-full-tensors", CH04,
           ((SHARD_LOCAL, "        local = full  # kept whole until its group is complete\n"),
            ("            yield name, local\n",
             "            yield name, shard_tensor(name, local, rank, tp_size, config)\n"),
            ("        group[slot] = local\n", "        group[slot] = (name, local)\n"),
            (FUSED_YIELD, "            yield fused, torch.cat([shard_tensor(*group[i], rank, tp_size, config) "
                          "for i in range(parts)], dim=0)")),
           "test_shard_and_merge", "buffers the full q/k/v and gate/up tensors and shards them at the end: right "
           "values, several full tensors alive at once"),
    Mutant("merge-reads-ahead", CH04,
           (("    for name, full in tensors:", "    for name, full in list(tensors):"),),
           "test_shard_and_merge", "reads the whole checkpoint before yielding anything"),
    Mutant("merge-silent-when-incomplete", CH04, (("    if waiting:\n", "    if False:\n"),),
           "test_shard_and_merge_names_missing_parts", "ends quietly with fused tensors missing parts"),
    Mutant("merge-keeps-tied-head", CH04,
           (('        if "rotary_emb" in name or (config.tie_word_embeddings and name.startswith("lm_head.")):',
             '        if "rotary_emb" in name:'),),
           "test_shard_and_merge", "loads lm_head although the model ties it to the embedding"),
    Mutant("kv-rank-unchecked", CH04,
           (("    if not 0 <= rank < tp_size:", "    if False:"),),
           "test_kv_heads_of_rank", "a rank outside 0 .. tp - 1 gets KV heads instead of a ValueError"),
    Mutant("qkv-fp32", CH04, (("    return torch.cat([q_local, k_local, v_local], dim=0)",
                                "    return torch.cat([q_local, k_local, v_local], dim=0).float()"),),
           "test_shard_qkv", "returns the fused shard in fp32 for bf16 weights"),
    Mutant("qkv-rows-unchecked", CH04,
           (('    _rows(q, num_heads, "q", num_heads * head_dim)\n', ""),),
           "test_shard_qkv_rejects_what_does_not_split", "a q with the wrong number of rows is sharded anyway"),
    Mutant("tp1-returns-input", CH04,
           (('    module = name.split(".")[-2] if "." in name else ""\n    if module in ("k_proj", "v_proj"):',
             '    module = name.split(".")[-2] if "." in name else ""\n'
             '    if tp_size == 1:\n        return tensor  # whole\n'
             '    if module in ("k_proj", "v_proj"):'),),
           "test_shard_rules", "at tp = 1 returns the checkpoint's own tensor, not a copy"),
    Mutant("row-bias-split", CH04,
           (('    if module in ROW_PARALLEL and name.endswith(".weight"):',
             '    if module in ROW_PARALLEL and name.endswith(".bias"):\n'
             '        size = _split(tensor.shape[0], tp_size, name)\n'
             '        return tensor[rank * size:(rank + 1) * size].clone()\n'
             '    if module in ROW_PARALLEL and name.endswith(".weight"):'),),
           "test_shard_rules", "splits o_proj's bias over the ranks, which the all-reduce then sums"),
    Mutant("kv-split-unchecked", CH04,
           (("        first, count = kv_heads_of_rank(rank, tp_size, config.num_kv_heads)\n"
             "        return tensor[first * config.head_dim:(first + count) * config.head_dim].clone()",
             "        if config.num_kv_heads % tp_size and tp_size % config.num_kv_heads:\n"
             "            return tensor.clone()  # does not split: every rank keeps them all\n"
             "        first, count = kv_heads_of_rank(rank, tp_size, config.num_kv_heads)\n"
             "        return tensor[first * config.head_dim:(first + count) * config.head_dim].clone()"),),
           "test_shard_rules_reject_uneven_splits", "KV heads that do not fit tp are replicated whole, without a word"),
    Mutant("merge-keeps-rotary", CH04, (('"rotary_emb" in name or ', ""),),
           "test_shard_and_merge", "yields rotary_emb.inv_freq, which the engine computes itself"),
    Mutant("merge-fused-at-end", CH04,
           (("            del waiting[fused]\n"
             "            yield fused, torch.cat([group[i] for i in range(parts)], dim=0)"
             "  # slot order, not arrival order\n",
             "            done.append((fused, torch.cat([group[i] for i in range(parts)], dim=0)))\n"
             "            del waiting[fused]\n"),
            ("    waiting: dict[str, dict[int, torch.Tensor]] = {}  # fused name -> slot -> shard\n",
             "    waiting: dict[str, dict[int, torch.Tensor]] = {}  # fused name -> slot -> shard\n    done = []\n"),
            ("    if waiting:\n", "    yield from done\n    if waiting:\n")),
           "test_shard_and_merge", "yields the fused tensors only after the whole checkpoint"),
    Mutant("vocab-pads-last-rank-only", CH04,
           (("        shard = torch.zeros(shard_size, *tensor.shape[1:], dtype=tensor.dtype, device=tensor.device)\n",
             "        if rank < tp_size - 1:\n            return rows.clone()  # only the last shard is short\n"
             "        shard = torch.zeros(shard_size, *tensor.shape[1:], dtype=tensor.dtype, device=tensor.device)\n"),),
           "test_vocab_shard_rule_at_every_padding", "pads the last shard only: with V = 5 at tp = 4 the third shard "
           "is short too"),
    Mutant("kv-rank-negative-unchecked", CH04,
           (("    if not 0 <= rank < tp_size:", "    if rank >= tp_size:"),),
           "test_kv_heads_of_rank", "refuses a rank past the last but not rank -1"),
    Mutant("qkv-rows-too-many-unchecked", CH04,
           (("    if tensor.shape[0] != expected:", "    if tensor.shape[0] < expected:"),),
           "test_shard_qkv_rejects_what_does_not_split", "refuses a q, k or v with too few rows, not one with too many"),
    Mutant("shard-error-unnamed", CH04,
           (('        raise ValueError(f"tp_size={tp_size} does not divide {what}={total}")',
             '        raise ValueError(f"tp_size={tp_size} does not divide {total}")'),),
           "test_shard_rules_reject_uneven_splits", "refuses an uneven split without naming the tensor"),
    Mutant("merge-missing-unnamed", CH04,
           (('        raise ValueError(f"the checkpoint ended with parts of {sorted(waiting)} missing")',
             '        raise ValueError(f"the checkpoint ended with {len(waiting)} fused tensor(s) missing parts")'),),
           "test_shard_and_merge_names_missing_parts", "says parts are missing without naming the fused tensor"),
    Mutant("merge-keyed-by-module", CH04,
           (("        group = waiting.setdefault(fused, {})",
             '        key = fused.split(".", 3)[-1]  # e.g. self_attn.qkv_proj.weight\n'
             "        group = waiting.setdefault(key, {})"),
            ("            del waiting[fused]\n", "            del waiting[key]\n")),
           "test_shard_and_merge", "collects the parts of a fused tensor by module, not by layer: layers whose parts "
           "interleave are fused across layers"),
    # ---- chapter 05 -------------------------------------------------------------------------
    Mutant("vocab-mask-off-by-one", CH05,
           ((EMBED_MASK, "    mine = (input_ids > start) & (input_ids < start + shard_size)"),),
           "test_vocab_embedding", "a shard's first id is treated as foreign (> instead of >=)"),
    Mutant("vocab-ids-in-place", CH05,
           ((EMBED_IDS, "    local_ids = input_ids.sub_(start).clamp_(0, shard_size - 1)"),),
           "test_vocab_embedding", "shifts the caller's input_ids in place"),
    Mutant("vocab-engine-layer", CH05,
           (("    return all_reduce(rows)  # exactly one rank contributed each row",
             "    from minisgl.layers import VocabParallelEmbedding\n"
             "    layer = VocabParallelEmbedding.__new__(VocabParallelEmbedding)\n"
             "    layer.vocab_size, layer.shard_size, layer.weight = vocab_size, shard_size, weight_shard\n"
             "    layer.vocab_start, layer.vocab_end = start, min(start + shard_size, vocab_size)\n"
             "    return layer.forward(input_ids)"),),
           "test_vocab_embedding", "delegates to the engine's VocabParallelEmbedding"),
    Mutant("vocab-shard-unchecked", CH05,
           ((SHARD_CHECK_EMBED, "    shard_size = weight_shard.shape[0]"),),
           "test_vocab_embedding_rejects_a_wrong_shard", "trusts the shard's size"),
    Mutant("lm-head-padding-kept", CH05, ((HEAD_TRIM, "    return logits"),),
           "test_lm_head", "the padding columns are not trimmed"),
    Mutant("lm-head-rank-major", CH05, ((HEAD_ORDER, "    logits = gathered.reshape(n, tp * shard_size)"),),
           "test_lm_head", "the gathered [tp * n, shard] blocks are reshaped without reordering"),
    Mutant("lm-head-by-all-reduce", CH05,
           ((HEAD_GATHER, "    rank = get_tp_info().rank\n"
                          "    spread = local.new_zeros(tp, n, shard_size)\n    spread[rank] = local\n"
                          "    gathered = all_reduce(spread).reshape(tp * n, shard_size)  # summed into place"),),
           "test_lm_head", "assembles the logits with an all-reduce of zero-padded blocks instead of one all-gather"),
    Mutant("lm-head-fp32-out", CH05, ((HEAD_TRIM, "    return logits[:, :vocab_size].float()"),),
           "test_lm_head", "returns fp32 logits for bf16 inputs"),
    Mutant("vocab-skips-reduce-tp1", CH05,
           (("    return all_reduce(rows)  # exactly one rank contributed each row",
             "    return rows if get_tp_info().size == 1 else all_reduce(rows)"),),
           "test_vocab_embedding", "skips the all-reduce at tp = 1, where the contract still wants the one call"),
    Mutant("vocab-fp32", CH05, (("    return all_reduce(rows)  # exactly one rank contributed each row",
                                  "    return all_reduce(rows.float())"),),
           "test_vocab_embedding", "returns fp32 embeddings for a bf16 table"),
    Mutant("lm-head-transposes-in-place", CH05,
           (("    local = F.linear(hidden_states, weight_shard)  # [n, shard_size]",
             "    local = hidden_states @ weight_shard.t_()  # [n, shard_size], the caller's shard turned in place"),),
           "test_lm_head", "transposes the caller's weight shard in place"),
    Mutant("lm-head-shard-unchecked", CH05,
           (('    shard_size = _shard_size(weight_shard, vocab_size, "parallel_lm_head")',
             "    shard_size = weight_shard.shape[0]"),),
           "test_lm_head_rejects_a_wrong_shard", "trusts the shard's size"),
    Mutant("vocab-real-rows-negative", CH05,
           ((EMBED_IDS, "    real = min(shard_size, vocab_size - start)  # the rows of this shard that hold ids\n"
                        "    local_ids = torch.where(mine, input_ids - start, 0).clamp(0, real - 1)"),),
           "test_vocab_embedding", "counts a shard's real rows as V - start, negative on a shard that is all padding"),
    Mutant("lm-head-trims-last-block", CH05,
           ((HEAD_TRIM, "    real = vocab_size - (tp - 1) * shard_size  # only the last shard is padded\n"
                        "    return torch.cat([logits[:, :(tp - 1) * shard_size], "
                        "logits[:, (tp - 1) * shard_size:][:, :real]], dim=1)"),),
           "test_lm_head", "trims the padding from the last block only: V = 5 at tp = 4 pads two shards (at tp = 2 "
           "only the last shard is ever padded)", world_size=4),
    Mutant("vocab-shard-too-many-unchecked", CH05,
           ((SHARD_CHECK_EMBED, "    shard_size = -(-vocab_size // get_tp_info().size)\n"
                                "    if weight_shard.shape[0] < shard_size:\n"
                                "        raise ValueError(f\"a shard needs {shard_size} rows\")"),),
           "test_vocab_embedding_rejects_a_wrong_shard", "refuses a shard with too few rows, not one with too many"),
    Mutant("lm-head-checks-primary-only", CH05,
           (('    shard_size = _shard_size(weight_shard, vocab_size, "parallel_lm_head")',
             "    shard_size = weight_shard.shape[0]\n"
             "    if get_tp_info().is_primary:  # checked once, on rank 0\n"
             '        shard_size = _shard_size(weight_shard, vocab_size, "parallel_lm_head")'),),
           "test_lm_head_rejects_a_wrong_shard", "checks the shard on rank 0 only: the other ranks go on into the "
           "all-gather"),
    Mutant("lm-head-gathers-weight", CH05,
           ((HEAD_GATHER, "    table = all_gather(weight_shard)  # [tp * shard_size, hidden]: the whole padded table\n"
                          "    return F.linear(hidden_states, table[:vocab_size])\n" + HEAD_GATHER),),
           "test_lm_head", "all-gathers the weight shards and computes every logit on every rank: right values, "
           "the whole table sent instead of the logits"),
    Mutant("vocab-reduces-table", CH05,
           (("    return all_reduce(rows)  # exactly one rank contributed each row",
             "    table = weight_shard.new_zeros(get_tp_info().size * shard_size, weight_shard.shape[1])\n"
             "    table[start:start + shard_size] = weight_shard\n"
             "    return F.embedding(input_ids, all_reduce(table))  # the whole table on every rank"),),
           "test_vocab_embedding", "all-reduces the whole padded table, then looks every id up: right values, the "
           "table sent instead of the rows"),
    Mutant("vocab-ids-max-on-empty", CH05,
           ((EMBED_MASK, "    if int(input_ids.max()) >= vocab_size:  # no tokens: max() of nothing raises\n"
                         '        raise ValueError("an id past the vocabulary")\n' + EMBED_MASK),),
           "test_vocab_embedding", "checks the ids with max(), which fails when there are no tokens"),
    # ---- chapter 06 -------------------------------------------------------------------------
    Mutant("count-from-last-rank", CH06,
           ((COUNT_BROADCAST, hand_count(LAST_OF_GROUP)),),
           "test_receive_step", "broadcasts the count from the last rank"),
    Mutant("empty-step-skipped", CH06,
           ((COUNT_BROADCAST, "    skip = io.tp_info.is_primary and not pulled\n"
                              "    count = 0 if skip else broadcast_count(len(pulled), io.cpu_group)"),),
           "test_receive_step", "rank 0 skips the count when it has nothing (the others wait in a broadcast it "
           "never joins)"),
    Mutant("count-on-default-group", CH06,
           ((COUNT_BROADCAST, "    import torch.distributed as dist\n"
                              "    count = broadcast_count(len(pulled), dist.group.WORLD)"),),
           "test_receive_step", "broadcasts on the default group, not io.cpu_group"),
    Mutant("count-src-zero", CH06, ((COUNT_BROADCAST, hand_count("0")),),
           "test_receive_step", "takes global rank 0 as the group's rank 0", world_size=4),
    Mutant("tp1-broadcasts", CH06,
           (("    if io.tp_info.size == 1:\n        return list(pulled)  # no peers: nothing to broadcast\n", ""),),
           "test_receive_step", "broadcasts and publishes at tp = 1, where there is no one to tell (and no publisher)"),
    Mutant("receive-pops-pulled", CH06,
           (("        for payload in pulled:\n            io.publisher.put_raw(payload)\n        return list(pulled)",
             "        sent = []\n        while pulled:\n            sent.append(pulled.pop(0))\n"
             "            io.publisher.put_raw(sent[-1])\n        return sent"),),
           "test_receive_step", "empties the caller's list while publishing it"),
    Mutant("count-broadcast-twice", CH06,
           ((COUNT_BROADCAST, COUNT_BROADCAST + "\n    broadcast_count(count, io.cpu_group)  # agreed, again"),),
           "test_receive_step", "broadcasts the count a second time each step"),
    Mutant("count-src-by-offset", CH06,
           ((COUNT_BROADCAST, hand_count("dist.get_rank() - io.tp_info.rank")),),
           "test_receive_step", "the root's global rank as this rank's minus its group rank: wrong in {1, 3}",
           world_size=4),
    # ---- chapter 07 -------------------------------------------------------------------------
    Mutant("mlp-merge-before-shard", CH07,
           ((MLP_GATE_UP, "    gate_up = torch.cat([gate, up])[2 * tp.rank * size:2 * (tp.rank + 1) * size]"),),
           "test_tp_mlp", "gate_up fused before sharding"),
    Mutant("mlp-uneven-unchecked", CH07, ((MLP_CHECK, ""),),
           "test_tp_mlp_rejects_an_intermediate_size_tp_does_not_divide",
           "splits 10 intermediate rows 4 ways silently"),
    Mutant("kv-heads-not-replicated", CH07,
           (("    q_local, kv_local = heads // tp_size, max(1, kv_heads // tp_size)",
             "    q_local, kv_local = heads // tp_size, kv_heads // tp_size"),),
           "test_local_shapes", "num_kv_heads // tp, which is 0 when tp > num_kv_heads"),
    Mutant("head-dim-from-hidden", CH07,
           (('    head_dim = hf_config.get("head_dim") or hidden // heads', "    head_dim = hidden // heads"),),
           "test_local_shapes", "derives head_dim from hidden / heads although the config sets it"),
    Mutant("head-dim-required", CH07,
           (('    head_dim = hf_config.get("head_dim") or hidden // heads', '    head_dim = hf_config["head_dim"]'),),
           "test_local_shapes", "a config without head_dim raises KeyError (it means hidden / heads)"),
    Mutant("missing-key-keyerror", CH07,
           (('    missing = [key for key in REQUIRED if key not in hf_config]', "    missing = []"),),
           "test_local_shapes_names_a_missing_key", "a missing key surfaces as KeyError"),
    Mutant("local-shapes-engine-check", CH07,
           (("    valid = valid_tp_sizes(heads, kv_heads, intermediate)",
             "    from minisgl.models.config import ModelConfig\n"
             "    config = ModelConfig.from_dict({'architectures': ['LlamaForCausalLM'], **hf_config})\n"
             "    valid = config.valid_tp_sizes()"),),
           "test_local_shapes", "asks the engine's ModelConfig for the valid tp sizes"),
    Mutant("mlp-fp32", CH07, (("    return all_reduce(partial)", "    return all_reduce(partial.float())"),),
           "test_tp_mlp", "returns fp32 for bf16 inputs"),
    Mutant("mlp-transposes-down-in-place", CH07,
           (("    down_shard = down[:, rows]  # [hidden, intermediate / tp], a strided view: fine on every device",
             "    down_shard = down.t_()[rows].t()  # the caller's down turned in place"),),
           "test_tp_mlp", "transposes the caller's down weight in place"),
    Mutant("local-shapes-no-kv-check", CH07,
           (("            if heads % tp == 0 and intermediate % tp == 0 and "
             "(kv_heads % tp == 0 or tp % kv_heads == 0)]",
             "            if heads % tp == 0 and intermediate % tp == 0]"),),
           "test_local_shapes_rejects_bad_tp", "the valid tp sizes forget that the KV heads must fit too"),
    Mutant("kv-heads-required", CH07,
           (('    kv_heads = hf_config.get("num_key_value_heads") or heads',
             '    kv_heads = hf_config["num_key_value_heads"]'),),
           "test_local_shapes", "a config without num_key_value_heads raises KeyError (it means as many as heads)"),
    # ---- chapter 09 -------------------------------------------------------------------------
    Mutant("ring-factor-one-pass", CH09,
           (("    return 2 * (tp_size - 1) / tp_size", "    return (tp_size - 1) / tp_size"),),
           "test_ring_factor", "ring factor (t - 1) / t instead of 2 (t - 1) / t"),
    Mutant("count-forgets-embedding", CH09,
           (('    return 2 * hf_config["num_hidden_layers"] + 1', '    return 2 * hf_config["num_hidden_layers"]'),),
           "test_all_reduces_per_forward", "2 * layers, forgetting the embedding's all-reduce"),
    Mutant("ring-factor-tp0", CH09, (("    _check_tp(tp_size)\n    return 2 * (tp_size - 1) / tp_size",
                                      "    return 2 * (tp_size - 1) / tp_size"),),
           "test_ring_factor", "tp_size 0 divides by zero instead of raising ValueError"),
    Mutant("bytes-ignore-dtype", CH09,
           (('    return hf_config["hidden_size"] * dtype_bytes  # one hidden vector',
             '    return hf_config["hidden_size"] * 2'),),
           "test_all_reduce_bytes_per_token", "counts 2 bytes per element whatever the dtype"),
    Mutant("sent-bytes-one-way", CH09,
           (("    return payload * ring_factor(tp_size)", "    return payload * ring_factor(tp_size) / 2"),),
           "test_sent_bytes_per_rank_per_token", "counts the reduce-scatter half of the ring only"),
    Mutant("logits-ignore-dtype", CH09,
           (('    return hf_config["vocab_size"] * dtype_bytes * (tp_size - 1) / tp_size  # the shards it lacks',
             '    return hf_config["vocab_size"] * 2 * (tp_size - 1) / tp_size'),),
           "test_logits_gather_bytes_per_rank", "counts 2 bytes per logit whatever the dtype"),
    # ---- chapter 11 -------------------------------------------------------------------------
    Mutant("match-partial-page", CH11,
           ((MATCH_WHOLE, "        whole = -(-common_prefix_len(child.key, token_ids[pos:]) // size)"),),
           "test_match_counts_whole_pages_only", "counts a partly matched page (rounds up, not down)"),
    Mutant("match-whole-edges-only", CH11,
           ((MATCH_TAKE, "        if whole * size < len(child.key):\n"
                         "            break\n        pages += child.pages\n"),),
           "test_match_stops_inside_an_edge", "an edge that matches in part gives none of its pages"),
    Mutant("match-no-stamp", CH11, ((MATCH_STAMP, ""),),
           "test_match_stamps_every_node_it_goes_into", "never sets last_access: eviction is no longer LRU"),
    Mutant("match-no-tick", CH11, (("    tree.clock += 1\n", ""),),
           "test_match_stamps_every_node_it_goes_into", "stamps with the clock without ticking it"),
    Mutant("match-stamps-whole-edges", CH11,
           ((MATCH_STAMP, ""), (MATCH_TAKE, MATCH_TAKE + MATCH_STAMP)),
           "test_match_stamps_every_node_it_goes_into", "the partly matched node keeps its old last_access"),
    Mutant("match-returns-node-list", CH11,
           (("        pages += child.pages[:whole]",
             "        pages = child.pages if not pages and whole == len(child.pages) "
             "else pages + child.pages[:whole]"),),
           "test_match_changes_nothing_else_and_returns_its_own_list",
           "returns the first node's own page list, which the caller then extends"),
    Mutant("match-engine", CH11, (("    size = tree.page_size\n", "    return tree.match(token_ids)[1]\n"),),
           "test_match_returns_the_pages_of_the_longest_cached_prefix", "calls the engine's RadixTree.match"),
    Mutant("evict-most-recent-first", CH11,
           ((LEAF_ENTRY, "            leaves.append((-node.last_access, node.id, node))"),),
           "test_evict_least_recently_used_first", "evicts the most recently used leaf first"),
    Mutant("evict-ties-newest", CH11, ((LEAF_ENTRY, "            leaves.append((node.last_access, -node.id, node))"),),
           "test_evict_breaks_ties_by_the_oldest_node", "breaks last_access ties by the newest node"),
    Mutant("evict-locked", CH11, (("        if not node.children and node.lock_ref == 0:",
                                   "        if not node.children:"),),
           "test_evict_never_takes_a_locked_node", "evicts a leaf a running request still uses"),
    Mutant("evict-parent-stays", CH11, ((PARENT_PUSH, ""),),
           "test_evict_lets_a_parent_follow_its_last_child", "a parent left without children never goes"),
    Mutant("evict-stale-counter", CH11, (("        tree.num_evictable -= len(leaf.pages)\n", ""),),
           "test_evict_stops_once_it_has_enough", "forgets to count the evicted pages out of num_evictable"),
    Mutant("evict-num-pages-stale", CH11, (("        tree.num_pages -= len(leaf.pages)\n", ""),),
           "test_evict_least_recently_used_first", "forgets to count the evicted pages out of num_pages"),
    Mutant("evict-keeps-child-entry", CH11, (("        del parent.children[tuple(leaf.key[:tree.page_size])]\n", ""),),
           "test_evict_lets_a_parent_follow_its_last_child", "the evicted node stays in its parent's children"),
    Mutant("evict-everything", CH11, ((EVICT_LOOP, "    while leaves:"),),
           "test_evict_stops_once_it_has_enough", "evicts every unlocked leaf, however few pages were asked"),
    Mutant("evict-at-least-one", CH11, ((EVICT_LOOP, "    while (not freed or len(freed) < num_pages) and leaves:"),),
           "test_evict_takes_nothing_for_zero_pages", "always evicts one node, even for 0 pages"),
    Mutant("evict-engine", CH11, (("    leaves, stack = [], list(tree.root.children.values())\n",
                                   "    return tree.evict(num_pages)\n"),),
           "test_evict_random_trees", "calls the engine's RadixTree.evict"),
    # ---- chapter 12 -------------------------------------------------------------------------
    Mutant("layout-dealt-in-turn", CH12, ((LAYOUT_BLOCK, "    ranks = range(node_rank, tp_size, nnodes)"),),
           "test_node_layout_examples", "ranks dealt to the nodes in turn (0, 2 | 1, 3), not in blocks"),
    Mutant("layout-gpu-by-rank", CH12, ((LAYOUT_RETURN, LAYOUT_RETURN.replace("local %", "rank %")),),
           "test_node_layout_examples", "the GPU from the global tp rank, not the process's place on its node"),
    Mutant("layout-rank-major", CH12,
           ((LAYOUT_ORDER, "    processes = [(replica, rank) for rank in ranks for replica in range(dp_size)]"),),
           "test_node_layout_examples", "the replicas' ranks started rank by rank instead of replica after replica"),
    Mutant("layout-gpu-past-the-end", CH12, ((LAYOUT_RETURN, LAYOUT_RETURN.replace("local % gpus_per_node", "local")),),
           "test_node_layout_shares_gpus_when_there_are_fewer", "a GPU index past the node's GPUs"),
    Mutant("layout-lists", CH12, ((LAYOUT_RETURN, LAYOUT_RETURN.replace("[(replica, rank, local % gpus_per_node)",
                                                                        "[[replica, rank, local % gpus_per_node]")),),
           "test_node_layout_returns_plain_ints", "lists where the contract asks for tuples"),
    Mutant("layout-dp-over-nodes", CH12, ((DP_CHECK, ""),),
           "test_node_layout_errors", "replicas spread over several nodes instead of a ValueError"),
    Mutant("layout-engine-block", CH12,
           ((LAYOUT_BLOCK, "    from minisgl.scheduler.process import node_ranks\n"
                           "    ranks = node_ranks(tp_size, nnodes, node_rank)"),),
           "test_node_layout_examples", "the engine's own node_ranks"),
    Mutant("rr-starts-at-one", CH12, ((ROUND_ROBIN, "        return (num_sent + 1) % len(loads)"),),
           "test_round_robin_ignores_the_loads", "the first request goes to replica 1"),
    Mutant("rr-skips-busy", CH12,
           ((ROUND_ROBIN, "        return num_sent % len(loads) if len(set(loads)) == 1 else loads.index(min(loads))"),),
           "test_round_robin_ignores_the_loads", "round-robin that turns to the least loaded replica"),
    Mutant("least-load-last-tie", CH12,
           ((LEAST_LOAD, "    return max(i for i, load in enumerate(loads) if load == smallest)"),),
           "test_least_load_ties_go_to_the_lowest_index", "a tie goes to the highest index"),
    Mutant("least-load-picks-most", CH12, (("    smallest = min(loads)", "    smallest = max(loads)"),),
           "test_least_load_picks_the_fewest", "the busiest replica instead of the idlest"),
    Mutant("least-load-counts-itself", CH12,
           ((LEAST_LOAD, "    choice = loads.index(smallest)\n    loads[choice] += 1  # one more request there\n"
                         "    return choice"),),
           "test_loads_are_left_unchanged", "adds the request to the caller's loads"),
    Mutant("policy-unknown-is-least-load", CH12, ((POLICY_CHECK, "    if False:"),),
           "test_dispatch_errors", "an unknown policy quietly becomes least-load"),
    Mutant("policy-any-case", CH12, ((POLICY_CHECK, "    policy = policy.lower()\n" + POLICY_CHECK),),
           "test_dispatch_errors", "'Round-Robin' accepted as round-robin"),
    Mutant("dispatch-engine-shortcut", CH12,
           ((POLICY_CHECK, "    from minisgl.scheduler.data_parallel import pick_replica as engine_pick\n"
                           "    return engine_pick(policy, loads, num_sent)\n" + POLICY_CHECK),),
           "test_round_robin_ignores_the_loads", "the engine's own pick_replica"),
    Mutant("dispatch-empty-loads-rr", CH12,
           (('    if not loads:\n        raise ValueError("loads is empty: there are no replicas to pick from")\n',
             '    if policy == "least-load" and not loads:\n        raise ValueError("loads is empty")\n'),),
           "test_dispatch_errors", "round-robin over no replicas divides by zero instead of a ValueError"),
    Mutant("layout-node-rank-unchecked", CH12, (("    if not 0 <= node_rank < nnodes:", "    if False:"),),
           "test_node_layout_errors", "a node_rank past the nodes gets ranks past tp_size instead of a ValueError"),
    Mutant("layout-uneven-unchecked", CH12, (("    if tp_size % nnodes != 0:", "    if False:"),),
           "test_node_layout_errors", "nnodes that does not divide tp_size leaves ranks out, without a word"),
    # ---- chapter 13 -------------------------------------------------------------------------
    Mutant("split-extra-to-the-last", CH13,
           ((STAGE_SIZE, "        size = base + 1 if stage >= pp_size - extra else base"),),
           "test_split_examples", "the extra layers go to the last stages, the one with the LM head among them"),
    Mutant("split-rest-on-the-last", CH13,
           ((STAGE_SIZE, "        size = base if stage < pp_size - 1 else num_layers - start"),),
           "test_split_examples", "every remainder layer piled onto the last stage"),
    Mutant("split-ceil-blocks", CH13,
           ((STAGE_SIZE, "        size = min(-(-num_layers // pp_size), num_layers - start)"),),
           "test_split_examples", "blocks of ceil(layers / stages), the last one short"),
    Mutant("split-lists", CH13,
           (("        blocks.append((start, start + size))", "        blocks.append([start, start + size])"),),
           "test_split_returns_plain_ints", "lists where the contract asks for tuples"),
    Mutant("split-empty-stages", CH13, ((EMPTY_STAGE_CHECK, "    if False:"),),
           "test_split_errors", "more stages than layers: stages without layers instead of a ValueError"),
    Mutant("split-engine", CH13, (("    base, extra = divmod(num_layers, pp_size)\n",
                                   "    from minisgl.models.stage import split_layers as engine_split\n"
                                   "    return [(r.start, r.stop) for r in engine_split(num_layers, pp_size)]\n"),),
           "test_split_examples", "the engine's own split_layers"),
    Mutant("weights-tied-first-only", CH13, ((TIED_RETURN, "        return [0]"),),
           "test_embedding_norm_and_head", "a tied LM head on the last stage without its table"),
    Mutant("weights-tied-everywhere", CH13,
           ((TIED_RETURN, "        return list(range(pp_size)) if tie_word_embeddings else [0]"),),
           "test_embedding_norm_and_head", "the tied table loaded on every stage, the middle ones too"),
    Mutant("weights-tied-twice", CH13, ((TIED_RETURN, "        return [0, last] if tie_word_embeddings else [0]"),),
           "test_one_stage_holds_a_tied_table_once", "one stage listed twice when it is first and last"),
    Mutant("weights-head-on-first", CH13,
           (('    if name in ("model.norm.weight", "lm_head.weight"):\n        return [last]',
             '    if name in ("model.norm.weight", "lm_head.weight"):\n        return [0]'),),
           "test_embedding_norm_and_head", "the final norm and LM head on the first stage"),
    Mutant("weights-layer-unchecked", CH13, ((LAYER_CHECK, "        if False:"),),
           "test_stage_weights_errors", "a layer past the model is not a ValueError"),
    Mutant("weights-unknown-on-first", CH13, ((UNKNOWN_NAME, "    return [0]"),),
           "test_stage_weights_errors", "an unknown tensor quietly loaded on stage 0"),
    Mutant("weights-engine", CH13,
           (("    blocks = split_layers(num_layers, pp_size)\n",
             "    from minisgl.models.stage import PipelineStage\n"
             "    return [s for s in range(pp_size)\n"
             "            if PipelineStage.of(s, pp_size, num_layers, tie_word_embeddings).holds(name)]\n"),),
           "test_layers_go_where_the_split_puts_them", "the engine's own PipelineStage.holds"),
    Mutant("weights-split-unchecked", CH13,
           (("    blocks = split_layers(num_layers, pp_size)\n", ""),
            ("        return [next(stage for stage, (start, end) in enumerate(blocks) if start <= layer < end)]",
             "        blocks = split_layers(num_layers, pp_size)\n"
             "        return [next(stage for stage, (start, end) in enumerate(blocks) if start <= layer < end)]")),
           "test_stage_weights_errors", "a split with empty stages is refused for layers only, not for the norm"),
    # ---- chapter 14 -------------------------------------------------------------------------
    Mutant("plan-by-expert-only", CH14, ((PLAN_KEY, "    key = experts"),),
           "test_dispatch_plan_examples", "sorted by expert id alone: wrong blocks when experts are not in rank order"),
    Mutant("plan-by-rank-only", CH14, ((PLAN_KEY, "    key = ranks"),),
           "test_dispatch_plan_orders_experts_inside_a_rank", "a rank's block is not sorted by expert"),
    Mutant("plan-inverse-is-order", CH14, ((PLAN_INVERSE, "    inverse = send_order.clone()\n"),),
           "test_a_dispatch_and_combine_through_the_plan_is_a_round_trip", "the send order taken for its inverse"),
    Mutant("plan-counts-short", CH14, ((PLAN_COUNTS, "    rank_counts = torch.bincount(ranks)"),),
           "test_dispatch_plan_examples", "no count for the last ranks when they get nothing"),
    Mutant("plan-counts-per-expert", CH14,
           ((PLAN_COUNTS, "    rank_counts = torch.bincount(experts, minlength=num_ranks)[:num_ranks]"),),
           "test_dispatch_plan_random_routings", "pairs counted per expert, not per rank"),
    Mutant("plan-ties-reversed", CH14,
           ((PLAN_SORT, "    send_order = torch.sort(key * len(key) - torch.arange(len(key)), stable=True).indices"),),
           "test_dispatch_plan_examples", "pairs of one expert sent last first"),
    Mutant("plan-int32", CH14, (("    return send_order, inverse, rank_counts",
                                 "    return send_order.int(), inverse.int(), rank_counts.int()"),),
           "test_dispatch_plan_returns_int64_and_leaves_inputs_unchanged", "int32 where the contract says int64"),
    Mutant("plan-key-in-place", CH14, ((PLAN_KEY, "    key = experts.add_(ranks * num_experts)"),),
           "test_dispatch_plan_returns_int64_and_leaves_inputs_unchanged",
           "builds the sort key in place, in topk_ids' memory (reshape is a view)"),
    Mutant("plan-no-range-check", CH14, ((PLAN_ID_CHECK, "    if False:"),),
           "test_dispatch_plan_errors", "an expert id past the end is not refused"),
    Mutant("plan-engine", CH14,
           ((PLAN_KEY, "    from minisgl.layers.moe_dispatch import dispatch_plan as engine_plan\n"
                       "    plan = engine_plan(topk_ids, expert_rank, num_ranks)\n"
                       "    return plan.send_order, plan.inverse, plan.rank_counts\n" + PLAN_KEY),),
           "test_dispatch_plan_examples", "the engine's own dispatch_plan"),
    Mutant("plan-on-cpu", CH14, (("    return send_order, inverse, rank_counts",
                                   "    return send_order.cpu(), inverse.cpu(), rank_counts.cpu()"),),
           "test_dispatch_plan_returns_int64_and_leaves_inputs_unchanged", "returns the plan on the CPU whatever the "
           "device of topk_ids", needs_gpu=True),
    Mutant("plan-rank-unchecked", CH14,
           (("    if expert_rank.numel() and (int(expert_rank.min()) < 0 or int(expert_rank.max()) >= num_ranks):",
             "    if False:"),),
           "test_dispatch_plan_errors", "a rank past num_ranks in expert_rank is not refused"),
    # ---- the capstone (chapter 15): the same functions inside the engine --------------------
    Mutant("capstone-head-rank-major", CH05, ((HEAD_ORDER, "    logits = gathered.reshape(n, tp * shard_size)"),),
           "test_your_tensor_parallelism_serves_a_model", "LM head blocks out of order: wrong tokens at tp > 1",
           graded_on="15"),
    Mutant("capstone-merge-arrival", CH04, ((FUSED_YIELD, ARRIVAL_YIELD),),
           "test_your_tensor_parallelism_serves_a_model", "q/k/v fused in checkpoint order (k, q, v)", graded_on="15"),
    Mutant("capstone-engine-head", CH05,
           ((HEAD_TRIM, "    from minisgl.layers import ParallelLMHead\n"
                        "    head = ParallelLMHead.__new__(ParallelLMHead)\n"
                        "    head.vocab_size, head.shard_size, head._tied_embedding = vocab_size, shard_size, None\n"
                        "    head.weight = weight_shard\n"
                        "    return head.forward(hidden_states)"),),
           "test_your_tensor_parallelism_serves_a_model", "the engine's own LM head inside the capstone",
           graded_on="15"),
]
