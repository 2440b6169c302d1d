"""Procedural data with known quality: interior scenes and their benchmark, distorted real photos, A1 questions."""
