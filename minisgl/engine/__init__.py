"""One rank's engine: device, communicators, model, KV pool, attention backend, sampler, CUDA graphs
(chapters 02-04 and 10)."""
