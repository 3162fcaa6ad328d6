package resultcache

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// newRedisClient makes clients that honour context deadlines on the socket: the cache bounds
// every call with its own timeout, and go-redis otherwise waits out its read timeout (seconds)
// on a Redis that accepted the connection but stalls.
func newRedisClient(raw string) (redis.UniversalClient, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	switch u.Scheme {
	case "redis", "rediss", "unix":
		opt, err := redis.ParseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), nil
	case "redis+cluster", "rediss+cluster":
		opt, err := redis.ParseClusterURL(strings.Replace(raw, "+cluster", "", 1))
		if err != nil {
			return nil, fmt.Errorf("redis cluster url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClusterClient(opt), nil
	case "redis+sentinel", "rediss+sentinel":
		opt, err := redis.ParseFailoverURL(strings.Replace(raw, "+sentinel", "", 1))
		if err != nil {
			return nil, fmt.Errorf("redis sentinel url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(opt), nil
	}
	return nil, fmt.Errorf("redis url scheme %q: want redis, rediss, unix, redis+cluster or redis+sentinel", u.Scheme)
}
