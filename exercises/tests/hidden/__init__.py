"""Hidden tests: more cases of the public tests' contracts, with shapes drawn afresh on every run,
so no answer can be fitted to the public cases. Instructor material: the autograder bundle has
them, a student release does not."""
