"""Evaluation of a ratings manifest: data-parallel scoring, PLCC/SRCC/KRCC/HOR metrics, plots."""
