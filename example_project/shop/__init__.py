"""A small shop whose reports, receipts, payments and loyalty points are computed by jobs."""
