"""Foreign table formats: Arrow tables, Parquet files and Hugging Face
datasets converted into aligned stores (``arrow``), and such a directory
opened as one multi-stream dataset (``multistream``). Users import
``loaderx.arrow``; this module imports nothing, so pyarrow is loaded only
when a conversion needs it.
"""
