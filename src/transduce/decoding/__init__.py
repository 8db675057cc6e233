"""Inference on a trained model: the predictors a run directory loads (translator.py: `Translator`, parser.py:
`Parser`, classifier.py: `Classifier`), and what they decode with: greedy and beam search (search.py), the tree
constraint (constraints.py), ensembles (ensemble.py), MBR reranking (mbr.py)."""
