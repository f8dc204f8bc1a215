"""Reference answers to exercises/, file for file. Each answer wraps the engine's own code where the
engine has it (minisgl.layers, minisgl.models.weight, minisgl.process, ...); grade them with
`pytest exercises --impl solutions`."""
