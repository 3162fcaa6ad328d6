package symbolize

import "time"

// SetCacheClock sets the result cache's clock, for tests of its expiry.
func SetCacheClock(s *Symbolizer, now func() time.Time) { s.cache.now = now }
