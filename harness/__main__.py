from harness.cli import app

app()
