"""Chapter 03 quiz (communication init): process groups, PyNCCL and the unique id (seed 000, 3.2).

Replace each None with your answer, then run `pytest exercises -m ch03`.
Numbers: an int or float in the unit the question asks for. Choices: the letter, e.g. "b".
Short answers: a sentence or two in your own words (they are checked for the key ideas).
"""

# Q1 (choice). In mini-SGLang (seed 000) at tp > 1 by default, which communicators exist?
#   a) an NCCL default group and nothing else
#   b) a gloo default group for CPU control, plus a separate PyNCCL communicator for tensors
#   c) an MPI communicator   d) gloo for everything
Q1 = None

# Q2 (choice). And with --disable-pynccl?
#   a) an NCCL default group, plus a new gloo group for CPU control   b) gloo only
#   c) PyNCCL only   d) no communication
Q2 = None

# Q3 (number). How many bytes is an ncclUniqueId?
Q3 = None

# Q4 (choice). Who creates the unique id, and how do the others get it?
#   a) every rank creates its own   b) rank 0 creates it and broadcasts it over the gloo CPU group
#   c) the launcher puts it in an environment variable   d) NCCL derives it from the hostname
Q4 = None

# Q5 (choice). DistributedCommunicator.plugins holds several implementations. Which one runs?
#   a) the first   b) the last appended   c) each in turn   d) the one matching the tensor's device
Q5 = None

# Q6 (choice). In mini-SGLang at tp = 1, what is initialized?
#   a) no process group at all   b) a gloo process group, but no PyNCCL communicator
#   c) an NCCL group   d) a PyNCCL communicator of size 1
Q6 = None

# Q7 (short answer). Why keep a gloo CPU group next to NCCL instead of sending everything through NCCL?
Q7 = None
