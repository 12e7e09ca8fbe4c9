"""Studies as a library: points and their committed records, typed record access, claims fixed before the data,
verdicts with magnitude and a family-wise correction, and reports generated from the records.

Modules (each uses only those above it and the engine):

- ``studies.stats``: ``welch_ci`` (primary with few seeds), ``bootstrap_ci`` (seeds; coarse), ``paired_bootstrap_bleu``
  (test sentences), ``holm`` (adjusted p-values within a family), ``Interval``.
- ``studies.report``: ``Report`` (Markdown + CSV + PNG in one folder), ``markdown_table``, ``fmt``, ``mean_std``,
  ``write_csv``, ``source_commit``, ``REPO``.
- ``studies.points``: a config's ``sweep()`` points (``sweep_points``), ``run_point`` (``train.py`` subprocess, or
  ``in_process=True`` through ``engine.run``; writes ``<record>.json`` plus the decoded sentences and attention
  trace beside it; a point with a record is never retrained; a record made with other settings, by the
  ``settings_sha`` kept in it, is refused naming the point; a progress line per minute), ``point_record``.
- ``studies.records``: ``Record.load(path)`` / ``records_in(folder)``: typed fields (``valid_nll``, ``test_bleu``,
  ``epochs``, ``stability.max_grad_norm``, ``valid_nll_at(step)``, ``bleu_rows``, ``metric(name)``) and the files
  beside it (``trace()``, ``hypotheses()``).
- ``studies.claims``: ``Claim`` (contrast ``a`` vs ``b`` by group label, metric, paper value, equivalence margin,
  min seeds, family, ``Conditions``, ``Registration``; ``sides(groups)``, ``has_seeds(a, b)``), ``evaluate(claims,
  groups) -> [Verdict]`` (Welch, Holm within each family, verdict before/after the correction, ratio to the paper's
  value, budget, the machines the records name, pre-registration from git history).
- ``studies.runner``: ``Job`` and ``train_jobs`` (train the points without a record, resumable) and
  ``trained_on_text`` (where a report's points trained).
- ``studies.inprocess``: short in-process experiments without records (``load``, ``with_overrides``, ``run_point``
  returning a history).
- ``studies.sweeps``: a sweep folder's report (``python -m studies sweep``; one line per setting, seeds aggregated).

See docs/studies.md for a worked example and how to add a study.
"""
