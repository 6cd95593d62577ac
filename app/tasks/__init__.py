"""User tasks: few-shot examples (or a locally computed spec) in, ranked learnwares out."""
