"""The results document (results.json): one typed model that every stage after the run hands on.

- `model`: the document (`Results`) and its op part; `kernels`: the lint part; `diff`: the baseline diff
  part; `coverage`: what each op x dtype exercised; `base`: the shared base class and constrained scalars.
- `codec`: the one reader and writer (untrusted documents are validated once, where they enter);
  `schema`: the JSON Schema, generated from the model.
- `rules`: how an op's status follows from its case counts; `merge`: shards -> the unsharded document;
  `snapshots`: failing cases' exact inputs as .npz files named by their hash.
"""
