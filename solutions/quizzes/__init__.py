"""Reference quiz answers, one file per chapter."""
