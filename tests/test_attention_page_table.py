"""The device page table shared by the Triton and FlashInfer backends, and the CSR view of a batch
that FlashInfer plans with, built on a CPU (no FlashInfer and no GPU needed)."""

from __future__ import annotations

import pytest
import torch

from minisgl.attention.page_table import DevicePageTable
from minisgl.core import Req, SamplingParams
from minisgl.kvcache import KVCachePool

CPU = torch.device("cpu")


def _req(uid: int, pages: list[int]) -> Req:
    req = Req(uid, [0], SamplingParams(temperature=0), 1)
    req.pages = pages
    return req


def test_rows_are_reused_after_release_and_new_pages_are_uploaded() -> None:
    pool = KVCachePool(1, 32, 4, 1, 8, torch.float32, CPU)
    table = DevicePageTable(pool, CPU, max_seq_len=20, max_requests=2)  # 5 pages a request
    a, b = _req(0, [3, 7]), _req(1, [9])
    assert table.upload([a, b]) == [1, 2]  # row 0 is the padding row
    a.pages.append(11)
    assert table.upload([a]) == [1]
    assert table.table[1, :3].tolist() == [3, 7, 11] and table.table[2, 0] == 9
    with pytest.raises(RuntimeError, match="more than 2 live requests"):
        table.upload([_req(2, [4])])
    table.release(b)
    assert table.upload([_req(3, [4])]) == [2]


def test_flashinfer_csr_of_a_batch() -> None:
    pytest.importorskip("triton")  # flashinfer_backend imports the Triton store_kv kernel
    from minisgl.attention.flashinfer_backend import paged_kv_csr

    page_size = 4
    pool = KVCachePool(1, 32, page_size, 1, 8, torch.float32, CPU)
    table = DevicePageTable(pool, CPU, max_seq_len=20, max_requests=3)
    reqs = [_req(0, [3, 7, 11]), _req(1, [9]), _req(2, [5, 6])]
    rows = table.upload(reqs) + [0]  # plus one CUDA-graph padding row
    kv_lens = [9, 1, 8, 1]  # 3 pages (1 token in the last), 1 page, 2 full pages, padding
    indptr, indices, last_page_len = paged_kv_csr(table.table, rows, kv_lens, page_size)
    assert indptr.tolist() == [0, 3, 4, 6, 7]
    assert indices.tolist() == [3, 7, 11, 9, 5, 6, 0]  # the padding row reads page 0
    assert last_page_len.tolist() == [1, 1, 4, 1]
    assert indptr.dtype == indices.dtype == last_page_len.dtype == torch.int32
