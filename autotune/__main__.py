from autotune.cli import app

app(prog_name="autotune")
