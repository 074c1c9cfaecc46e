"""Reporting: GA-only against GA+CP-SAT tables (`compare`), summaries of plans (`summary`) and timelines as
figures or Chrome traces (`timeline`)."""
