"""The course's autograder: the adapters seam, real multi-rank runs, comparisons and the report.

Nothing here is for learners to edit. Kept free of heavy imports so spawned helper processes start fast.
"""
