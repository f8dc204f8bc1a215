"""Each live request's KV page ids, kept in one row of a table on the device, for the backends that
read the pool in place through a page table: Triton and FlashInfer (chapter 10).

A row is written when its request first shows up; after that, a step uploads only the pages the
request gained since (a decode step adds one page at a time as the request grows, chapter 11) and
each request's row index: a few hundred bytes, whatever the context length. Pages are only ever
appended to a live row; a retracted request releases its row, and gets a fresh one when it is
admitted again. Row 0 is never handed out: it points at page 0, which the allocator never hands out
either, so CUDA-graph padding rows read harmless data.
"""

from __future__ import annotations

import weakref

import torch

from minisgl.core import Req
from minisgl.kvcache import KVCachePool


class DevicePageTable:
    def __init__(self, pool: KVCachePool, device: torch.device, max_seq_len: int, max_requests: int) -> None:
        self.device = device
        self.max_pages_per_req = pool.pages_for(max_seq_len)
        # [rows, max_pages] int32; row 0 (all page 0) is the padding row
        self.table = torch.zeros(max_requests + 1, self.max_pages_per_req, dtype=torch.int32, device=device)
        self._free_rows = list(range(max_requests, 0, -1))
        # req -> [row, pages uploaded, finalizer]; the finalizer frees the row if a caller drops a
        # request without release() (tests driving the engine by hand)
        self._rows: weakref.WeakKeyDictionary[Req, list] = weakref.WeakKeyDictionary()

    def release(self, req: Req) -> None:
        """`req` finished: its row goes back to the free list (work already queued keeps reading
        the old contents; later uploads are ordered after it on the same stream)."""
        entry = self._rows.pop(req, None)
        if entry is not None:
            entry[2]()  # runs the finalizer now, once: the row is freed

    def upload(self, reqs: list[Req]) -> list[int]:
        """Row of each request, uploading page ids the device has not seen yet (one H2D copy)."""
        rows: list[int] = []
        index_parts: list[torch.Tensor] = []
        value_parts: list[torch.Tensor] = []
        width = self.max_pages_per_req
        for req in reqs:
            entry = self._rows.get(req)
            if entry is None:
                if not self._free_rows:
                    raise RuntimeError(
                        f"more than {self.table.shape[0] - 1} live requests in the attention backend; "
                        "raise max_running_requests or release finished requests (Engine.release)"
                    )
                row = self._free_rows.pop()
                entry = [row, 0, weakref.finalize(req, self._free_rows.append, row)]
                self._rows[req] = entry
            row, uploaded = entry[0], entry[1]
            num_pages = len(req.pages)
            if num_pages > width:
                raise ValueError(f"request {req.uid} holds {num_pages} pages; the page table fits {width}")
            if num_pages < uploaded:
                uploaded = 0  # the page list was replaced: upload it again
            if num_pages > uploaded:
                index_parts.append(torch.arange(uploaded, num_pages, dtype=torch.int64) + row * width)
                value_parts.append(torch.tensor(req.pages[uploaded:], dtype=torch.int32))
                entry[1] = num_pages
            rows.append(row)
        if index_parts:
            index = self.to_device(torch.cat(index_parts))
            values = self.to_device(torch.cat(value_parts))
            self.table.view(-1).index_copy_(0, index, values)
        return rows

    def to_device(self, host: torch.Tensor) -> torch.Tensor:
        if self.device.type == "cuda":
            return host.pin_memory().to(self.device, non_blocking=True)  # no host-device sync
        return host.to(self.device)
