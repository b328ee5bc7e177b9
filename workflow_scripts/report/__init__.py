"""The HTML report's charts (``snakemake --report report.html``): one section each for the plan, the data and
the training, each a set of matplotlib charts with the tables behind them and a self-contained page.

Reads any stage's outputs, never writes them; what has not run yet is simply absent. matplotlib is imported
only by the report jobs (``snakepack report``), never while the Snakefile is parsed.

- ``build``: ``snakepack report SECTION``, one section's charts, tables and page;
- ``plan``, ``data``, ``training``: the three sections' charts; ``charts``: a chart and its table, saved
  with stable bytes; ``consumption``: what each checkpoint has read of each language and domain;
- ``layout``: the charts' and files' names, for the rules (standard library only).
"""
