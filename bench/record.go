package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
)

// Record is the small value of most scenarios.
type Record struct {
	ID    int     `json:"id" msgpack:"id"`
	Name  string  `json:"name" msgpack:"name"`
	Email string  `json:"email" msgpack:"email"`
	Score float64 `json:"score" msgpack:"score"`
}

func makeRecord(i int) *Record {
	return &Record{
		ID:    i,
		Name:  "User " + strconv.Itoa(i),
		Email: "user" + strconv.Itoa(i) + "@example.com",
		Score: float64(i%1000) / 7,
	}
}

func recordKey(i int) string { return "rec:" + strconv.Itoa(i) }

// format is how a peer or a baseline turns values into bytes: the plain
// libraries, without this module's codec wrappers, so that the baselines
// are what a user would write by hand.
type format struct {
	name      string
	marshal   func(any) ([]byte, error)
	unmarshal func([]byte, any) error
	codec     hybrid.Codec // the matching codec for our cache
}

var (
	fmtJSON    = format{"JSON", json.Marshal, json.Unmarshal, codec.JSON{}}
	fmtMsgpack = format{"msgpack", msgpack.Marshal, msgpack.Unmarshal, codec.Msgpack{}}
)

// Config is the ~40 KiB configuration document of scenario 4: the kind of
// nested settings object services re-read on every request.
type Config struct {
	Version     string             `json:"version" msgpack:"version"`
	Environment string             `json:"environment" msgpack:"environment"`
	UpdatedAt   string             `json:"updatedAt" msgpack:"updatedAt"`
	Services    []Service          `json:"services" msgpack:"services"`
	Features    map[string]Feature `json:"features" msgpack:"features"`
	Databases   []Database         `json:"databases" msgpack:"databases"`
	Limits      map[string]int     `json:"limits" msgpack:"limits"`
}

type Service struct {
	Name       string               `json:"name" msgpack:"name"`
	Owner      string               `json:"owner" msgpack:"owner"`
	Tags       []string             `json:"tags" msgpack:"tags"`
	Endpoints  []Endpoint           `json:"endpoints" msgpack:"endpoints"`
	RateLimits map[string]RateLimit `json:"rateLimits" msgpack:"rateLimits"`
	Env        map[string]string    `json:"env" msgpack:"env"`
	Retry      Retry                `json:"retry" msgpack:"retry"`
}

type Endpoint struct {
	URL       string  `json:"url" msgpack:"url"`
	Region    string  `json:"region" msgpack:"region"`
	Weight    int     `json:"weight" msgpack:"weight"`
	TimeoutMs int     `json:"timeoutMs" msgpack:"timeoutMs"`
	Healthy   bool    `json:"healthy" msgpack:"healthy"`
	Load      float64 `json:"load" msgpack:"load"`
}

type RateLimit struct {
	PerSecond int  `json:"perSecond" msgpack:"perSecond"`
	Burst     int  `json:"burst" msgpack:"burst"`
	Enforce   bool `json:"enforce" msgpack:"enforce"`
}

type Retry struct {
	Attempts  int     `json:"attempts" msgpack:"attempts"`
	BackoffMs int     `json:"backoffMs" msgpack:"backoffMs"`
	Jitter    float64 `json:"jitter" msgpack:"jitter"`
}

type Feature struct {
	Enabled  bool           `json:"enabled" msgpack:"enabled"`
	Rollout  float64        `json:"rollout" msgpack:"rollout"`
	Segments []string       `json:"segments" msgpack:"segments"`
	Variants map[string]int `json:"variants" msgpack:"variants"`
}

type Database struct {
	Name     string   `json:"name" msgpack:"name"`
	Host     string   `json:"host" msgpack:"host"`
	Port     int      `json:"port" msgpack:"port"`
	PoolMin  int      `json:"poolMin" msgpack:"poolMin"`
	PoolMax  int      `json:"poolMax" msgpack:"poolMax"`
	Replicas []string `json:"replicas" msgpack:"replicas"`
}

// makeConfig builds a deterministic config whose JSON encoding is about
// target bytes, and returns it with that encoding.
func makeConfig(target int) (*Config, []byte) {
	r := rand.New(rand.NewPCG(40, 960))
	regions := []string{"eu-west-1", "eu-central-1", "us-east-1", "us-west-2", "ap-southeast-1"}
	words := []string{"billing", "search", "catalog", "checkout", "profile", "inventory", "pricing", "shipping", "reviews", "auth", "notify", "ledger"}
	c := &Config{
		Version:     "2024.11.3-rc2",
		Environment: "production",
		UpdatedAt:   "2024-11-18T09:41:27Z",
		Features:    map[string]Feature{},
		Limits:      map[string]int{},
	}
	for i := 0; i < 6; i++ {
		db := Database{Name: fmt.Sprintf("%s-db", words[i]), Host: fmt.Sprintf("%s.db.internal", words[i]), Port: 5432 + i, PoolMin: 4, PoolMax: 64}
		for j := 0; j < 3; j++ {
			db.Replicas = append(db.Replicas, fmt.Sprintf("%s-replica-%d.%s.db.internal", words[i], j, regions[j]))
		}
		c.Databases = append(c.Databases, db)
	}
	for i := 0; i < 40; i++ {
		c.Limits[fmt.Sprintf("max_%s_%d", words[i%len(words)], i)] = 100 + r.IntN(10000)
	}
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", words[i%len(words)], i/len(words))
		s := Service{
			Name:       name,
			Owner:      "team-" + words[(i*7)%len(words)],
			Tags:       []string{"tier-" + strconv.Itoa(1+i%3), words[(i+3)%len(words)], "go"},
			RateLimits: map[string]RateLimit{},
			Env:        map[string]string{},
			Retry:      Retry{Attempts: 1 + i%4, BackoffMs: 50 * (1 + i%5), Jitter: 0.2},
		}
		for j := 0; j < 3; j++ {
			s.Endpoints = append(s.Endpoints, Endpoint{
				URL:       fmt.Sprintf("https://%s.%s.svc.example.internal:8443/v%d", name, regions[(i+j)%len(regions)], 1+j%2),
				Region:    regions[(i+j)%len(regions)],
				Weight:    10 + r.IntN(90),
				TimeoutMs: 250 * (1 + r.IntN(8)),
				Healthy:   r.IntN(10) > 0,
				Load:      float64(r.IntN(1000)) / 1000,
			})
		}
		for _, op := range []string{"read", "write", "admin"} {
			s.RateLimits[op] = RateLimit{PerSecond: 100 + r.IntN(5000), Burst: 10 + r.IntN(500), Enforce: r.IntN(4) > 0}
		}
		for j := 0; j < 4; j++ {
			s.Env[fmt.Sprintf("%s_SETTING_%d", words[(i+j)%len(words)], j)] = fmt.Sprintf("value-%d-%d", i, r.IntN(100000))
		}
		c.Services = append(c.Services, s)
		if i%2 == 0 {
			f := Feature{Enabled: r.IntN(3) > 0, Rollout: float64(r.IntN(101)) / 100, Variants: map[string]int{"control": 50, "treatment": 50}}
			f.Segments = []string{"beta", "staff", regions[i%len(regions)]}
			c.Features[fmt.Sprintf("ff_%s_%d", words[(i*5)%len(words)], i)] = f
		}
		b, _ := json.Marshal(c)
		if len(b) >= target {
			return c, b
		}
	}
}
