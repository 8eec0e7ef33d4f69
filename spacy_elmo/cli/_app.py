import typer

app = typer.Typer(
    name="spacy-elmo",
    help="spaCy ELMo: pretrain, evaluate, export and package ELMo biLMs.",
    no_args_is_help=True,
    add_completion=False,
)
