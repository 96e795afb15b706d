// Placeholder translation unit until the module has sources.
