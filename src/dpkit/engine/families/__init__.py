"""Release families on tables: cdf, ranges, quantiles, marginals, synthetic data."""
