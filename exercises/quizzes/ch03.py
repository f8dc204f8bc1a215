"""Chapter 03 quiz (communication init): process groups, PyNCCL and the unique id.

Replace each None with your answer, then run `pytest exercises -m ch03`.
choice: one letter, e.g. "b".  multi: every letter that applies, e.g. "bd" (the exact set scores).
order: every letter once, in your order, e.g. "dacb".  number: an int or float in the unit asked.
"""

# Q1 (choice). In mini-SGLang (engine/engine.py at commit 20fcd7f) at tp > 1 by default, which communicators exist?
#   a) an NCCL default group and nothing else
#   b) an MPI communicator between the processes
#   c) a gloo group for every tensor, whether on CPU or GPU
#   d) a gloo CPU group plus a PyNCCL communicator
Q1 = None

# Q2 (choice). And with --disable-pynccl?
#   a) a gloo default group and nothing else
#   b) a PyNCCL communicator and nothing else
#   c) an NCCL default group plus a gloo CPU group
#   d) no process group at all: the run falls back to tp = 1
Q2 = None

# Q3 (number). How many bytes is an ncclUniqueId?
Q3 = None

# Q4 (choice). Who creates the unique id, and how do the others get it?
#   a) every rank creates its own id
#   b) rank 0 creates it; a gloo broadcast shares it
#   c) the launcher puts it in an environment variable
#   d) NCCL derives it from the host name
Q4 = None

# Q5 (choice). DistributedCommunicator.plugins holds several implementations. Which one runs?
#   a) the last one appended
#   b) the first one in the list
#   c) each of them in turn
#   d) the one that matches the tensor's device
Q5 = None

# Q6 (choice). In mini-SGLang at tp = 1, what is initialized?
#   a) no process group at all
#   b) an NCCL group of one rank
#   c) a PyNCCL communicator of size 1
#   d) a gloo group, but no PyNCCL
Q6 = None

# Q7 (multi). Why keep a gloo CPU group next to NCCL? Which statements are true?
#   a) control messages (message counts, the unique id) live in host memory
#   b) gloo moves CPU tensors without touching a GPU or its stream
#   c) gloo's collectives also run on a machine without any GPU
#   d) the unique id must travel before any NCCL communicator exists
#   e) gloo moves activations faster than NCCL does
Q7 = None
