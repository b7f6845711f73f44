"""Arrays in object stores: URLs, the object-store backend, concurrent fetching and the local
chunk cache."""
