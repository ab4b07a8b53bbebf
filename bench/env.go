package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-redis/cache/v9"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// env is what every scenario shares: the Redis, the mode and the data sets.
type env struct {
	quick    bool
	reps     int
	addr     string
	ownRedis bool
	srv      *server         // the redis-server the harness started; nil with -redis
	rdb      *redis.Client   // the baselines' client; also ours' shared L2 client
	bus      *invalidate.Bus // shared by our instances that need no bus of their own
	run      string          // prefix of every key and channel of this run
	secret   []byte
	progress io.Writer
	rng      *rand.Rand
	records  *recordData
	notes    []string // things noticed during the run, printed at the end
	traces   []string // trace files of scenario 10
}

func (e *env) newClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: e.addr})
}

// k returns a key prefix for one data set of this run.
func (e *env) k(name string) string { return e.run + name + "." } // no ":": it is our Namespace too

// pick returns small in quick mode, full otherwise.
func pick[T any](e *env, quick, full T) T {
	if e.quick {
		return quick
	}
	return full
}

func (e *env) note(format string, args ...any) {
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
}

// settle collects garbage left by the previous phase so it is not billed
// to the next one.
func settle() {
	runtime.GC()
	debug.FreeOSMemory()
}

// recordData is the 10,000-record data set, stored in Redis once per run
// in every encoding the scenarios read.
type recordData struct {
	n    int
	keys []string
	recs []*Record
	// Key prefixes (Namespaces for ours).
	rawJSON, rawMsgpack, oursJSON, oursMsgpack, goCache string
}

const numRecords = 10_000

// recordSet returns the record data set, seeding Redis the first time.
func (e *env) recordSet(ctx context.Context) (*recordData, error) {
	if e.records != nil {
		return e.records, nil
	}
	d := &recordData{
		n:           numRecords,
		rawJSON:     e.k("raw-json"),
		rawMsgpack:  e.k("raw-mp"),
		oursJSON:    e.k("ours-json"),
		oursMsgpack: e.k("ours-mp"),
		goCache:     e.k("gocache"),
	}
	for i := range d.n {
		d.keys = append(d.keys, recordKey(i))
		d.recs = append(d.recs, makeRecord(i))
	}
	if err := seedRaw(ctx, e.rdb, d.rawJSON, d.keys, d.recs, fmtJSON.marshal); err != nil {
		return nil, err
	}
	if err := seedRaw(ctx, e.rdb, d.rawMsgpack, d.keys, d.recs, fmtMsgpack.marshal); err != nil {
		return nil, err
	}
	cd := cache.New(&cache.Options{Redis: e.rdb})
	if err := seedRaw(ctx, e.rdb, d.goCache, d.keys, d.recs, cd.Marshal); err != nil {
		return nil, err
	}
	for _, s := range []spec{{kind: nameOurs, prefix: d.oursJSON, f: fmtJSON}, {kind: nameOurs, prefix: d.oursMsgpack, f: fmtMsgpack}} {
		if err := seedOurs(ctx, e, s, d.keys, d.recs); err != nil {
			return nil, err
		}
	}
	e.records = d
	return d, nil
}

// seedRaw stores marshal(vals[i]) under prefix+keys[i], in pipelines.
func seedRaw[V any](ctx context.Context, rdb *redis.Client, prefix string, keys []string, vals []V, marshal func(any) ([]byte, error)) error {
	for start := 0; start < len(keys); start += 1000 {
		pipe := rdb.Pipeline()
		for i := start; i < min(start+1000, len(keys)); i++ {
			b, err := marshal(vals[i])
			if err != nil {
				return err
			}
			pipe.Set(ctx, prefix+keys[i], b, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("seed %s: %w", prefix, err)
		}
	}
	return nil
}

// seedOurs stores vals in our cache's shared tier (in its envelope) through
// a writer instance's Set, from 8 goroutines. (A fill's write-back runs
// after GetOrCreateMany returns, so Set is the call that says when the value
// is in Redis.)
func seedOurs[V any](ctx context.Context, e *env, s spec, keys []string, vals []V) error {
	w, err := hybrid.New[V](oursOptions(e, s, &countingRemote{s: l2.New(e.rdb, l2.Options{})}, nil))
	if err != nil {
		return err
	}
	defer w.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(keys); i += 8 {
				if err := w.Set(ctx, keys[i], vals[i]); err != nil {
					errs <- fmt.Errorf("seed %s: %w", s.prefix, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// deleteRun removes this run's keys from a Redis the harness did not start.
func (e *env) deleteRun(ctx context.Context) {
	iter := e.rdb.Scan(ctx, 0, e.run+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			e.rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		e.rdb.Unlink(ctx, batch...)
	}
}

// perm returns a random permutation of [0, n).
func (e *env) perm(n int) []int { return e.rng.Perm(n) }

// randomIndexes returns n random indexes in [0, max), repeats allowed.
func (e *env) randomIndexes(n, max int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = e.rng.IntN(max)
	}
	return out
}

// progressf prints one progress line.
func (e *env) progressf(format string, args ...any) {
	fmt.Fprintf(e.progress, format+"\n", args...)
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

func numCPU() int { return runtime.NumCPU() }
