"""Rendering a results document for people and tools: the PR comment and step summary (`markdown`), an HTML
page (`html`), SARIF (`sarif`), JUnit XML (`junit`) and workflow-command annotations (`annotations`). Every
renderer escapes for its own syntax with `escape`; `text` holds the plain phrases they share."""
