"""Red team, quiz 11: a class whose attributes are the answers. Stopped by: parsed, not run."""


class Answers:
    Q1 = 1


Q1 = Answers.Q1
