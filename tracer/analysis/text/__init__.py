"""The analysis in words and as JSON: sentences.py (the sentences the report and the viewer share) and
json_report.py (`report --json`)."""
