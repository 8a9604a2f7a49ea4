"""Telemetry during a server's life: what each node does (sampler) and what the engine
reports (scraper). Both write JSON lines to the run directory first; landing reads them."""
