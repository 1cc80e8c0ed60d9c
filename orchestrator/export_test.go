package orchestrator

// CachedSagas is how many sagas o's state cache holds.
func CachedSagas[T any](o *Orchestrator[T]) int { return o.cache.len() }
