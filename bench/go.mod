module github.com/hybridcache/hybridcache/bench

go 1.26.0

replace github.com/hybridcache/hybridcache => ../

require (
	github.com/go-redis/cache/v9 v9.0.0
	github.com/hybridcache/hybridcache v0.0.0-00010101000000-000000000000
	github.com/maypok86/otter/v2 v2.4.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/ulikunitz/xz v0.5.15
	github.com/vmihailenco/msgpack/v5 v5.4.1
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/vmihailenco/go-tinylfu v0.2.2 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
