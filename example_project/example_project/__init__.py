"""The example project's configuration package: settings, URLs and the WSGI entry point."""
