"""Human-readable reports of a run (the demo's ``report.html``)."""
