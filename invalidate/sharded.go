package invalidate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/keyslot"
)

// This file holds the Bus over sharded pub/sub, which New builds for a
// Redis Cluster client (see the package documentation, "Redis Cluster").
//
// A subscription to a channel is a subscription to its shard channels, one
// per hash slot (keyslot.Channel): each lives on the master that owns its
// slot, so that a write's script publishes on its own node, and each
// master carries only the messages of its own slots. go-redis's sharded
// PubSub cannot be trusted with that many channels: after a reconnect it
// sends them all in one SSUBSCRIBE, which Redis refuses (CROSSSLOT), and
// it ignores the SUNSUBSCRIBE a master sends when a slot leaves it. So the
// Bus owns one connection per master (shardConn), sends one SSUBSCRIBE per
// slot, never lets go-redis reconnect one (a connection that fails is
// closed, its slots lost), and a manager goroutine (run) reads the slot
// map (CLUSTER SLOTS) and places every slot's channels on the connection
// to its owner: at the first Subscribe, after a loss, and every recheck
// interval, which finds slots that moved without a word.

// sharded is the state of a Bus over sharded pub/sub. Its fields are
// under Bus.mu, but for the channel kick.
type sharded struct {
	rdb clusterClient

	// kick wakes the manager: a slot lost its subscription, a channel
	// was added.
	kick chan struct{}

	bases map[string]*shardBase // by channel name
	chans map[string]*shardChan // every shard channel of every base
	slots [keyslot.Count][]*shardChan
	conns map[string]*shardConn // by master address
	// fails counts, by address, the connections in a row that failed
	// before they answered; no new one is made before retryAt.
	fails   map[string]int
	retryAt map[string]time.Time
}

// shardBase is one channel subscribed, made of its shard channels.
type shardBase struct {
	name string
	subs []*sub
	// pending counts its shard channels not confirmed on the connection
	// to their slot's owner.
	pending int
	ready   chan struct{} // closed once pending first reaches 0
	up      bool          // pending reached 0 once
	lost    bool          // its active subscribers were told of a loss and await the restore
}

// shardChan is one shard channel of a base.
type shardChan struct {
	name      string
	slot      uint16
	base      *shardBase
	conn      *shardConn // where its SSUBSCRIBE went; nil: not sent
	confirmed bool       // Redis confirmed it on conn
}

// shardConn is the pub/sub connection to one master.
type shardConn struct {
	addr   string
	client *redis.Client
	ps     *redis.PubSub
	ctx    context.Context
	cancel context.CancelFunc
	dead   bool // under Bus.mu: failed or closed, its channels lost
	up     bool // it answered; under Bus.mu

	// wire is the connection's socket (see rawConn), set when it is
	// dialed; the SSUBSCRIBEs go straight to it, many in one write.
	wire atomic.Pointer[rawConn]
	// toSend holds the shard channels to subscribe on it, under Bus.mu;
	// send wakes its sender.
	toSend []string
	send   chan struct{}

	scratch []*sub // reused by its receive goroutine
}

// rawConn is a pub/sub connection's socket, whose writes are made one at
// a time: go-redis writes each of its commands (a PING, an SUNSUBSCRIBE) in
// one Write, and the sender writes a batch of SSUBSCRIBEs in one, so that
// none is cut into another.
type rawConn struct {
	net.Conn
	mu sync.Mutex
}

func (c *rawConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.Write(p)
}

// clusterClient is a Redis Cluster client: *redis.ClusterClient, or a type
// that embeds one.
type clusterClient interface {
	redis.UniversalClient
	Options() *redis.ClusterOptions
}

// newSharded returns the sharded state of a Bus over rdb.
func newSharded(rdb clusterClient) *sharded {
	return &sharded{
		rdb:     rdb,
		kick:    make(chan struct{}, 1),
		bases:   make(map[string]*shardBase),
		chans:   make(map[string]*shardChan),
		conns:   make(map[string]*shardConn),
		fails:   make(map[string]int),
		retryAt: make(map[string]time.Time),
	}
}

// wake kicks the manager without blocking.
func (sh *sharded) wake() {
	select {
	case sh.kick <- struct{}{}:
	default:
	}
}

// Sharded reports whether b uses sharded pub/sub (see the package
// documentation, "Redis Cluster"): a cache checks that its Remote
// announces the same way.
func (b *Bus) Sharded() bool { return b.sh != nil }

// ShardChannel returns the name of channel's shard channel in slot (a
// Redis Cluster hash slot, 0 to 16383), which a Bus over sharded pub/sub
// subscribes on slot's master: channel followed by a short tag in braces
// that hashes to slot, or, when channel has a hash tag of its own, channel
// itself (its one shard channel, in its tag's slot). A script that writes
// a key announces on the shard channel in the key's slot, from the key's
// node.
func ShardChannel(channel string, slot uint16) string { return keyslot.Channel(channel, slot) }

// shardChannel returns the shard channel that Publish uses for channel:
// its shard channel in the slot of its name (the channel itself when it
// has a hash tag).
func shardChannel(channel string) string {
	return keyslot.Channel(channel, keyslot.Of(channel))
}

// publishSharded is Publish over sharded pub/sub.
func (b *Bus) publishSharded(ctx context.Context, channel string, msg []byte) error {
	ch := shardChannel(channel)
	if err := b.sh.rdb.SPublish(ctx, ch, msg).Err(); err != nil {
		return fmt.Errorf("invalidate: spublish %q: %w", ch, err)
	}
	return nil
}

// subscribeSharded is Subscribe over sharded pub/sub.
func (b *Bus) subscribeSharded(ctx context.Context, channel string, s *sub) (unsubscribe func(), err error) {
	sh := b.sh
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	if !b.started {
		b.started = true
		b.wg.Add(1)
		go b.manage()
	}
	base := sh.bases[channel]
	if base == nil {
		base = &shardBase{name: channel, ready: make(chan struct{})}
		sh.bases[channel] = base
		add := func(slot uint16) {
			ch := &shardChan{name: keyslot.Channel(channel, slot), slot: slot, base: base}
			sh.chans[ch.name] = ch
			sh.slots[slot] = append(sh.slots[slot], ch)
			base.pending++
		}
		if keyslot.Tagged(channel) {
			add(keyslot.Of(channel)) // its one slot: every key under its tag
		} else {
			for slot := range uint16(keyslot.Count) {
				add(slot)
			}
		}
		sh.wake()
	}
	s.base = base
	base.subs = append(base.subs, s)
	return b.awaitUp(ctx, s, func() bool { return base.up }, func() chan struct{} { return base.ready }, b.unsubscribeSharded)
}

// unsubscribeSharded removes s and, if it was its channel's last
// subscriber, the channel's shard channels, unsubscribing them; then it
// waits for a callback of s in progress.
func (b *Bus) unsubscribeSharded(s *sub) {
	sh := b.sh
	b.mu.Lock()
	base := s.base
	var gone []*shardChan
	for i, x := range base.subs {
		if x != s {
			continue
		}
		base.subs = append(base.subs[:i], base.subs[i+1:]...)
		if len(base.subs) == 0 && sh.bases[base.name] == base {
			delete(sh.bases, base.name)
			for slot := range sh.slots {
				chans := sh.slots[slot][:0]
				for _, ch := range sh.slots[slot] {
					if ch.base != base {
						chans = append(chans, ch)
						continue
					}
					delete(sh.chans, ch.name)
					if ch.conn != nil && !ch.conn.dead {
						gone = append(gone, ch)
					}
				}
				sh.slots[slot] = chans
			}
		}
		break
	}
	s.active = false
	// By connection, in the order of the slots.
	byConn := map[*shardConn][]string{}
	var conns []*shardConn
	for _, ch := range gone {
		if byConn[ch.conn] == nil {
			conns = append(conns, ch.conn)
		}
		byConn[ch.conn] = append(byConn[ch.conn], ch.name)
	}
	for _, c := range conns {
		// Those not sent yet are not to be.
		c.toSend = slices.DeleteFunc(c.toSend, func(name string) bool { return sh.chans[name] == nil })
	}
	b.mu.Unlock()
	for _, c := range conns {
		// Written as the SSUBSCRIBEs were (see sendLoop); their
		// confirmations find the channels gone, and are ignored.
		if w := c.wire.Load(); w != nil {
			if _, err := writeEach(w, nil, "SUNSUBSCRIBE", byConn[c]); err != nil {
				b.killConn(c, fmt.Errorf("sunsubscribe: %w", err))
			}
		}
	}
	s.mu.Lock()
	s.removed = true
	s.mu.Unlock()
}

// loseChan takes ch off its connection: it needs subscribing again. If its
// base was up and not yet told of a loss, its active subscribers are
// appended to tell. The caller holds Bus.mu.
func (sh *sharded) loseChan(ch *shardChan, tell []*sub) []*sub {
	if ch.conn == nil {
		return tell
	}
	ch.conn = nil
	if ch.confirmed {
		ch.confirmed = false
		ch.base.pending++
	}
	if base := ch.base; base.up && !base.lost {
		base.lost = true
		for _, s := range base.subs {
			if s.active {
				tell = append(tell, s)
			}
		}
	}
	return tell
}

// confirm records Redis's confirmation of ch on c, and returns the
// subscribers to tell that their channel is restored.
func (sh *sharded) confirm(c *shardConn, name string, tell []*sub) []*sub {
	ch := sh.chans[name]
	if ch == nil || ch.conn != c || ch.confirmed {
		return tell // a channel left since, or sent again elsewhere
	}
	ch.confirmed = true
	base := ch.base
	base.pending--
	if base.pending > 0 {
		return tell
	}
	if !base.up {
		base.up = true
		close(base.ready)
	}
	if base.lost {
		base.lost = false
		for _, s := range base.subs {
			if s.active {
				tell = append(tell, s)
			}
		}
	}
	return tell
}

// manage is the manager goroutine of a Bus over sharded pub/sub: it places
// every shard channel on the connection to its slot's owner, when kicked
// and every recheck interval, backing off while the cluster cannot be
// read or a slot has no owner.
func (b *Bus) manage() {
	defer b.wg.Done()
	recheck := b.health
	if recheck <= 0 {
		recheck = defaultHealthInterval
	}
	var (
		attempt int
		failed  = limiter{every: logEvery}
	)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-b.sh.kick:
		case <-t.C:
		case <-b.done:
			return
		}
		if err := b.place(); err != nil {
			b.mu.Lock()
			b.lastErr = err
			b.mu.Unlock()
			if n, ok := failed.allow(); ok {
				b.log.Warn("invalidate: sharded pub/sub: cannot place every slot's subscription, retrying", "err", err, "suppressed", n)
			}
			t.Reset(b.backoff(attempt))
			attempt++
			continue
		}
		attempt = 0
		t.Reset(recheck)
	}
}

// place reads the slot map and subscribes every shard channel not yet
// sent on the connection to its slot's owner, taking off those on another
// (a slot that moved without a SUNSUBSCRIBE: a loss). It reports an error
// when the map could not be read, a slot has no owner, or a connection
// could not be made.
func (b *Bus) place() error {
	sh := b.sh
	b.mu.Lock()
	empty := len(sh.bases) == 0
	b.mu.Unlock()
	if empty {
		return nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, max(2*b.health, time.Second))
	defer cancel()
	owners, err := b.slotOwners(ctx)
	if err != nil {
		return err
	}
	var (
		tell      []*sub
		sends     = map[*shardConn][]string{} // the connections given channels to send
		unowned   int
		waiting   int // slots whose master is not to be dialed yet
		moved     int
		connected []*shardConn
	)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	for slot, chans := range sh.slots {
		if len(chans) == 0 {
			continue
		}
		addr := owners[slot]
		if addr == "" {
			unowned++
			for _, ch := range chans {
				tell = sh.loseChan(ch, tell)
			}
			continue
		}
		c := sh.conns[addr]
		if c == nil && time.Now().Before(sh.retryAt[addr]) {
			waiting++
			for _, ch := range chans {
				tell = sh.loseChan(ch, tell)
			}
			continue
		}
		if c == nil {
			c = b.newConn(addr)
			connected = append(connected, c)
		}
		for _, ch := range chans {
			if ch.conn != nil && ch.conn != c {
				moved++
				tell = sh.loseChan(ch, tell)
			}
			if ch.conn == nil {
				ch.conn = c
				c.toSend = append(c.toSend, ch.name)
				sends[c] = nil
			}
		}
	}
	b.mu.Unlock()
	b.tell(tell, false)
	for _, c := range connected {
		b.wg.Add(1)
		go b.receiveConn(c)
	}
	for c := range sends {
		select {
		case c.send <- struct{}{}:
		default:
		}
	}
	if moved > 0 {
		b.moved.Add(uint64(moved))
	}
	switch {
	case unowned > 0:
		return fmt.Errorf("%d slots have no master", unowned)
	case waiting > 0:
		return fmt.Errorf("%d slots wait for their master's connection to be tried again", waiting)
	}
	return nil
}

// slotOwners returns the address of the master of each slot ("" for
// none), as CLUSTER SLOTS shows it.
func (b *Bus) slotOwners(ctx context.Context) (*[keyslot.Count]string, error) {
	ranges, err := b.sh.rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("cluster slots: %w", err)
	}
	var owners [keyslot.Count]string
	for _, r := range ranges {
		if len(r.Nodes) == 0 || r.Start < 0 || r.End >= keyslot.Count || r.Start > r.End {
			continue
		}
		for s := r.Start; s <= r.End; s++ {
			owners[s] = r.Nodes[0].Addr
		}
	}
	return &owners, nil
}

// newConn makes the connection to the master at addr, without I/O: its
// receive goroutine dials. The caller holds Bus.mu.
func (b *Bus) newConn(addr string) *shardConn {
	c := &shardConn{addr: addr, send: make(chan struct{}, 1)}
	o := nodeOptions(b.sh.rdb.Options(), addr)
	dial := o.Dialer
	if dial == nil {
		dial = redis.NewDialer(o)
	}
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		rc := &rawConn{Conn: nc}
		c.wire.Store(rc)
		return rc, nil
	}
	c.client = redis.NewClient(o)
	c.ctx, c.cancel = context.WithCancel(b.ctx)
	c.ps = c.client.SSubscribe(c.ctx)
	b.sh.conns[addr] = c
	return c
}

// sendLoop writes the SSUBSCRIBEs given to c, until c ends: one per shard
// channel (channels of different slots cannot share one), as many as fit
// in one write, which go-redis could not do (it writes and flushes one
// command per call). Redis's confirmations come back to the receive
// goroutine.
func (b *Bus) sendLoop(c *shardConn) {
	defer b.wg.Done()
	var buf []byte
	for {
		select {
		case <-c.send:
		case <-c.ctx.Done():
			return
		}
		b.mu.Lock()
		names := c.toSend
		c.toSend = nil
		b.mu.Unlock()
		var err error
		if buf, err = writeEach(c.wire.Load(), buf, "SSUBSCRIBE", names); err != nil {
			b.killConn(c, fmt.Errorf("ssubscribe: %w", err))
			return
		}
	}
}

// writeEach writes the command cmd once for each of names to w, as many as
// fit in 64 KiB per write, using buf, which it returns for reuse.
func writeEach(w *rawConn, buf []byte, cmd string, names []string) ([]byte, error) {
	for len(names) > 0 {
		buf = buf[:0]
		for len(names) > 0 && len(buf) < 64<<10 {
			buf = appendCommand(buf, cmd, names[0])
			names = names[1:]
		}
		if _, err := w.Write(buf); err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// appendCommand appends the command args to buf in the Redis protocol.
func appendCommand(buf []byte, args ...string) []byte {
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	return buf
}

// nodeOptions returns the options of a client of the one node at addr,
// from those of the cluster's client.
func nodeOptions(o *redis.ClusterOptions, addr string) *redis.Options {
	return &redis.Options{
		Addr:                         addr,
		ClientName:                   o.ClientName,
		Dialer:                       o.Dialer,
		OnConnect:                    o.OnConnect,
		Protocol:                     o.Protocol,
		Username:                     o.Username,
		Password:                     o.Password,
		CredentialsProvider:          o.CredentialsProvider,
		CredentialsProviderContext:   o.CredentialsProviderContext,
		StreamingCredentialsProvider: o.StreamingCredentialsProvider,
		DialTimeout:                  o.DialTimeout,
		ReadTimeout:                  o.ReadTimeout,
		WriteTimeout:                 o.WriteTimeout,
		ContextTimeoutEnabled:        o.ContextTimeoutEnabled,
		TLSConfig:                    o.TLSConfig,
		DisableIdentity:              o.DisableIdentity,
		IdentitySuffix:               o.IdentitySuffix,
		PoolSize:                     1,
		MaxRetries:                   -1,
	}
}

// receiveConn is the receive goroutine of c: it dials, then reads and
// dispatches until the connection fails or the Bus closes, checking its
// health; then every channel on c is lost, and the manager kicked.
func (b *Bus) receiveConn(c *shardConn) {
	defer b.wg.Done()
	err := b.readConn(c)
	b.mu.Lock()
	closed := b.closed
	var tell []*sub
	if c.up {
		b.sh.fails[c.addr] = 0
	} else {
		b.sh.fails[c.addr]++
	}
	b.sh.retryAt[c.addr] = time.Now().Add(b.backoff(b.sh.fails[c.addr]))
	if !c.dead {
		c.dead = true
		if b.sh.conns[c.addr] == c {
			delete(b.sh.conns, c.addr)
		}
		for _, ch := range b.sh.chans {
			if ch.conn == c {
				tell = b.sh.loseChan(ch, tell)
			}
		}
	}
	if !closed && err != nil {
		b.lastErr = err
	}
	b.mu.Unlock()
	c.cancel()
	_ = c.ps.Close()
	_ = c.client.Close()
	if closed {
		return
	}
	if c.up {
		b.disconnects.Add(1)
	}
	b.log.Warn("invalidate: sharded pub/sub connection lost; its slots are subscribed again", "addr", c.addr, "err", err)
	b.tell(tell, false)
	b.sh.wake()
}

// readConn reads c until an error, which it returns.
func (b *Bus) readConn(c *shardConn) error {
	wctx, stop := context.WithTimeout(c.ctx, max(2*b.health, time.Second))
	err := c.ps.Ping(wctx) // dials with no channel, so nothing is re-sent at once
	stop()
	if err != nil {
		return fmt.Errorf("%s: %w", c.addr, err)
	}
	if c.wire.Load() == nil {
		return fmt.Errorf("%s: connection made without the Bus's dialer", c.addr)
	}
	b.mu.Lock()
	c.up = true
	b.mu.Unlock()
	b.wg.Add(1)
	go b.sendLoop(c)
	select {
	case c.send <- struct{}{}: // what place gave it before it was up
	default:
	}
	pinged := false
	for {
		v, err := c.ps.ReceiveTimeout(c.ctx, max(b.health, 0))
		if err != nil {
			var ne interface{ Timeout() bool }
			var re redis.Error
			switch {
			case c.ctx.Err() != nil:
				return c.ctx.Err()
			case errors.As(err, &ne) && ne.Timeout() && !pinged && b.health > 0:
				pinged = true
				pctx, stop := context.WithTimeout(c.ctx, b.health)
				perr := c.ps.Ping(pctx)
				stop()
				if perr != nil {
					return fmt.Errorf("%s: health check PING: %w", c.addr, perr)
				}
				continue
			case errors.As(err, &ne) && ne.Timeout():
				return fmt.Errorf("%s: no reply to PING within %v", c.addr, b.health)
			case errors.As(err, &re) && b.moved1(c, re.Error()):
				continue
			}
			return fmt.Errorf("%s: %w", c.addr, err)
		}
		pinged = false
		switch m := v.(type) {
		case *redis.Message:
			b.dispatchSharded(c, m)
		case *redis.Subscription:
			b.mu.Lock()
			var tell []*sub
			restored := false
			switch m.Kind {
			case "ssubscribe":
				tell, restored = b.sh.confirm(c, m.Channel, c.scratch[:0]), true
			case "sunsubscribe":
				// Unsolicited unless the channel left: its slot moved.
				if ch := b.sh.chans[m.Channel]; ch != nil && ch.conn == c {
					tell = b.sh.loseChan(ch, c.scratch[:0])
					b.moved.Add(1)
					b.sh.wake()
				}
			default:
				b.mu.Unlock()
				return fmt.Errorf("%s: unexpected %s confirmation for %q", c.addr, m.Kind, m.Channel)
			}
			c.scratch = tell
			b.mu.Unlock()
			if restored && len(tell) > 0 {
				b.reconnects.Add(1)
			}
			b.tell(tell, restored)
		case *redis.Pong:
		default:
			return fmt.Errorf("%s: unexpected pub/sub reply %T", c.addr, v)
		}
	}
}

// moved1 handles an error reply on c that says a slot is on another master
// (an SSUBSCRIBE sent before the slot map caught up): that slot's channels
// on c are lost, and the manager kicked. It reports whether msg was such a
// reply.
func (b *Bus) moved1(c *shardConn, msg string) bool {
	f := strings.Fields(msg)
	if len(f) != 3 || f[0] != "MOVED" || f[2] == c.addr {
		return false
	}
	var slot int
	if _, err := fmt.Sscan(f[1], &slot); err != nil || slot < 0 || slot >= keyslot.Count {
		return false
	}
	b.mu.Lock()
	var tell []*sub
	for _, ch := range b.sh.slots[slot] {
		if ch.conn == c {
			tell = b.sh.loseChan(ch, tell)
		}
	}
	b.mu.Unlock()
	b.moved.Add(1)
	b.tell(tell, false)
	b.sh.wake()
	return true
}

// dispatchSharded hands m, read from c, to the active subscribers of its
// channel's base. A message of a channel not subscribed on c (a slot taken
// off it, whose loss was told) is dropped.
func (b *Bus) dispatchSharded(c *shardConn, m *redis.Message) {
	b.received.Add(1)
	b.mu.Lock()
	subs := c.scratch[:0]
	if ch := b.sh.chans[m.Channel]; ch != nil && ch.conn == c {
		for _, s := range ch.base.subs {
			if s.active {
				subs = append(subs, s)
			}
		}
	}
	c.scratch = subs
	b.mu.Unlock()
	for i, s := range subs {
		b.deliver(s, []byte(m.Payload))
		subs[i] = nil
	}
}

// tell calls onLoss(restored) of each of subs.
func (b *Bus) tell(subs []*sub, restored bool) {
	for i, s := range subs {
		b.lose(s, restored)
		subs[i] = nil
	}
}

// killConn closes c for reason: its receive goroutine then ends, and its
// channels are lost.
func (b *Bus) killConn(c *shardConn, reason error) {
	b.mu.Lock()
	if b.lastErr == nil {
		b.lastErr = reason
	}
	b.mu.Unlock()
	c.cancel()
	_ = c.ps.Close()
}

// closeSharded closes every connection of a Bus over sharded pub/sub. The
// caller has marked the Bus closed.
func (b *Bus) closeSharded() {
	b.mu.Lock()
	conns := make([]*shardConn, 0, len(b.sh.conns))
	for _, c := range b.sh.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	for _, c := range conns {
		c.cancel()
		_ = c.ps.Close()
	}
}
