"""snakepack: the logic behind the Snakemake workflow, as small importable modules with thin CLIs."""
