"""Chapter 11 quiz (KV memory and the radix cache): what a token costs, pages on demand and
retraction, prefix matching at page granularity, and why every rank builds the same tree.

Reference answers: the autograder's keys (never part of a student release), graded by
`pytest exercises --impl solutions -m ch11`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (number). SmolLM2-135M in fp32 (30 layers, 3 KV heads, head_dim 64) at tp = 1: how many KiB
# of KV cache does one token take (keys and values, every layer)?
Q1 = 45

# Q2 (number). A 1 GiB KV budget holds SmolLM2 fp32 tokens at the size of Q1. Admission used to
# reserve a request's whole future up front; a chat request without max_tokens may run to the
# 8192-token context. How many such requests could run at once?
Q2 = 2

# Q3 (choice). Page size 4. The tree caches the edge [5 6 7 8 | 9 10 11 12]. A request arrives
# with the prompt [5 6 7 8 9 10 3 4 1]. How many of its tokens does it borrow from the cache?
#   a) 0
#   b) 4
#   c) 6
#   d) 8
Q3 = "b"

# Q4 (choice). A prompt that the tree holds in full still has its last token computed. Why?
#   a) the first new token comes from that token's logits: only a forward pass makes them
#   b) the radix tree never stores the last token of any prompt, only the tokens that come before it
#   c) a layer needs one query per request or it drops the request's cached keys and values
#   d) a prefill must rewrite the request's row of the page table before it may decode
Q4 = "a"

# Q5 (order). One request under the radix cache, from arrival to the end. Put these in order:
#   a) its tokens go into the tree and its leftover pages go back to the allocator
#   b) the longest cached prefix of its prompt is matched, and that node locked
#   c) pages are allocated for the rest of its prompt
#   d) its computed prompt joins the tree, for requests admitted after it
#   e) a decode step gives it one more page as its next token starts a page
Q5 = "bcdea"

# Q6 (multi). A decode step cannot get the pages it needs, so a request is retracted. Which are true?
#   a) its prompt and the tokens it generated so far are all computed again when it returns
#   b) its pages go back to the cache, which may keep them in the tree for its return
#   c) the text it already streamed to the client is withdrawn, and sent again later
#   d) the oldest running request goes first
#   e) it can happen in the middle of a forward pass, between two layers
Q6 = "ab"

# Q7 (choice). How do rank 0's numbers (cache hits, pages, retractions) reach GET /metrics?
#   a) an all-reduce over the gloo CPU group sums every rank's numbers into rank 0's
#   b) the API process asks each scheduler rank over HTTP when a scraper calls it
#   c) rank 0 sends them along its outputs; the detokenizer passes them to the API
#   d) rank 0 writes them to a file in the run's folder, which the API reads again
Q7 = "c"

# Q8 (choice). Why is the tree's "least recently used" a counter of operations, not the wall clock?
#   a) reading the wall clock on every match would cost more time than the match itself
#   b) a counter needs fewer bytes per node, so more nodes fit in host memory
#   c) the wall clock can go backwards when a request is retracted and comes back
#   d) two ranks read different times: they could evict different leaves and diverge
Q8 = "d"

# Q9 (number). new_token_ratio 0.5, ESTIMATE_CLIP 256, page size 16. A running request holds 7
# pages for its 100 tokens and may still generate 1,000. How many more pages does admission set
# aside for it?
Q9 = 8

# Q10 (multi). 32 questions over one 2,000-token document arrive together; radix cache, page
# size 1. Which are true?
#   a) the first step computes the document once, with the first question
#   b) all 32 compute the document in the first step, and share it afterwards
#   c) the other 31 wait one step, then each computes only its own question
#   d) with --cache naive, the document is computed once and shared the same way
#   e) the document's pages are freed as soon as the first request finishes
Q10 = "ac"
