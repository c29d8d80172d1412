"""The documents: the report model, its Markdown/HTML/JSON rendering, charts, Parquet export."""
