"""What the proxies' requests and answers carry beyond plain JSON: a bulk write's binary
body (batches) and a read page's records (pages)."""
