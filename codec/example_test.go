package codec_test

import (
	"errors"
	"fmt"

	"github.com/hybridcache/hybridcache/codec"
)

func ExampleMsgpack() {
	type user struct {
		ID   int
		Name string
	}
	c := codec.Msgpack{}

	data, err := c.Marshal(user{ID: 1, Name: "Ada"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var u user
	if err := c.Unmarshal(data, &u); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d bytes: %+v\n", len(data), u)

	// Five bytes that declare an array of four billion elements are
	// rejected before the decoder allocates for them.
	var v any
	err = c.Unmarshal([]byte("\xdd\xff\xff\xff\xff"), &v)
	fmt.Println(errors.Is(err, codec.ErrMalformed))
	fmt.Println(err)
	// Output:
	// 14 bytes: {ID:1 Name:Ada}
	// true
	// codec: msgpack: malformed input: array32 at offset 0 declares 4294967295 elements, 0 bytes left
}

func ExampleRaw() {
	c := codec.Raw{}

	data, err := c.Marshal("<h1>rendered page</h1>")
	if err != nil {
		fmt.Println(err)
		return
	}
	var page string
	if err := c.Unmarshal(data, &page); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(page)

	_, err = c.Marshal(42)
	fmt.Println(errors.Is(err, codec.ErrUnsupportedType))
	fmt.Println(err)
	// Output:
	// <h1>rendered page</h1>
	// true
	// codec: raw: marshal: unsupported type int: want []byte, string, *[]byte or *string
}
