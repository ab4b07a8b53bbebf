package codec_test

import (
	"encoding/json"
	"testing"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/vmihailenco/msgpack/v5"
)

// The json.* and msgpack.* sub-benchmarks call the libraries directly, as
// the baseline for the codecs' overhead.

func BenchmarkMarshal(b *testing.B) {
	b.Run("JSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (codec.JSON{}).Marshal(testUser); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(testUser); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Msgpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (codec.Msgpack{}).Marshal(testUser); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := msgpack.Marshal(testUser); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkUnmarshal(b *testing.B) {
	jsonData, err := codec.JSON{}.Marshal(testUser)
	if err != nil {
		b.Fatal(err)
	}
	msgpackData, err := codec.Msgpack{}.Marshal(testUser)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("JSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var u user
			if err := (codec.JSON{}).Unmarshal(jsonData, &u); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var u user
			if err := json.Unmarshal(jsonData, &u); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Msgpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var u user
			if err := (codec.Msgpack{}).Unmarshal(msgpackData, &u); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var u user
			if err := msgpack.Unmarshal(msgpackData, &u); err != nil {
				b.Fatal(err)
			}
		}
	})
}
