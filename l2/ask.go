package l2

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/tier"
)

// This file holds what keeps a write's message from being lost while its
// slot migrates, over sharded pub/sub. Once a key has moved to the
// importing master and before the slot's move ends, Redis answers a write
// of it with ASK, and go-redis sends it again to the importing master
// (ASKING first). The script runs there, and its SPUBLISH reaches that
// master's shard only, where no instance listens yet: they listen on the
// slot's owner until the move ends and the owner unsubscribes them. So a
// write that was asked is announced again, by SPUBLISH routed to the
// slot's owner as go-redis knows it, which during a move is the migrating
// master, where the instances listen. A message heard twice changes
// nothing (a drop is the same twice; a swap takes a newer value only).
//
// The Store learns that a write was asked from a hook on go-redis's node
// clients (the ASKING command in what it sends), which it adds to every
// node of a cluster client: those made from then on (OnNewNode), and those
// it has already, at its first announced write (ForEachShard).

// askKey is the context key of an askWatch.
type askKey struct{}

// askWatch records whether a call went to a master by ASK.
type askWatch struct{ asked atomic.Bool }

// askHook marks the askWatch of a pipeline's ctx when the pipeline holds
// an ASKING: go-redis sends a command it was asked to move that way.
type askHook struct{}

func (askHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (askHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (askHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if w, _ := ctx.Value(askKey{}).(*askWatch); w != nil {
			for _, c := range cmds {
				if c.Name() == "asking" {
					w.asked.Store(true)
					break
				}
			}
		}
		return next(ctx, cmds)
	}
}

// nodeHooker is a cluster client whose node clients can be given hooks.
type nodeHooker interface {
	OnNewNode(func(rdb *redis.Client))
	ForEachShard(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

// watchAsks hooks the node clients rdb makes from now on, when the Store
// announces over sharded pub/sub; the others are hooked by hookNodes.
func (s *Store) watchAsks() {
	if h, ok := s.rdb.(nodeHooker); ok && s.sharded {
		h.OnNewNode(func(c *redis.Client) { c.AddHook(askHook{}) })
	}
}

// hookNodes hooks the node clients rdb has already, once it could list
// them. A node hooked twice (made between watchAsks and this) marks twice.
func (s *Store) hookNodes(ctx context.Context) {
	h, ok := s.rdb.(nodeHooker)
	if !ok || s.hooked.Load() {
		return
	}
	s.hookMu.Lock()
	defer s.hookMu.Unlock()
	if s.hooked.Load() {
		return
	}
	err := h.ForEachShard(ctx, func(_ context.Context, c *redis.Client) error {
		c.AddHook(askHook{})
		return nil
	})
	if err == nil {
		s.hooked.Store(true)
	}
}

// asked returns ctx with an askWatch, when w's messages go over sharded
// pub/sub, or ctx and nil.
func (s *Store) asked(ctx context.Context, f tier.Feed) (context.Context, *askWatch) {
	if !s.sharded || f.Channel == "" {
		return ctx, nil
	}
	s.hookNodes(ctx)
	w := &askWatch{}
	return context.WithValue(ctx, askKey{}, w), w
}

// republish sends again the messages of ws, whose writes were asked: each
// write's (Msg when it stored, else Else) on the shard channel of its key,
// and f's, where the batch is in one slot and announced in it, on that
// slot's (see announceArgs), in one pipeline routed by go-redis.
func (s *Store) republish(ctx context.Context, ws []tier.Write, f tier.Feed, stored []bool) error {
	pipe := s.rdb.Pipeline()
	n := 0
	for i := range ws {
		msg := ws[i].Else
		if stored[i] {
			msg = ws[i].Msg
		}
		if msg != nil {
			pipe.SPublish(ctx, keyslot.Channel(f.Channel, slot(s.prefix+ws[i].Key)), msg)
			n++
		}
	}
	if announced(f) && f.Entry == nil && s.oneSlot(ws) {
		pipe.SPublish(ctx, keyslot.Channel(f.Channel, slot(s.prefix+ws[0].Key)), f.Msg)
		n++
	}
	if n == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return err
}
