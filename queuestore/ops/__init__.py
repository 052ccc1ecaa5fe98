"""Operations: the ``queuestore`` command and its messages, the demo, presentation, references.

:mod:`~queuestore.ops.cli` is the command's entry point and imports the rest
of queuestore only when a command needs it, so ``--help`` starts at once;
nothing here is imported by the library itself.
"""
