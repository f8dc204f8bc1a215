"""Your side of the course: one file per chapter with the functions to write, and `quizzes/`.

`pytest exercises` grades these files; `pytest exercises --impl solutions` grades the reference
answers instead. Start with `exercises/README.md` (chapter 00 walks through it).
"""
