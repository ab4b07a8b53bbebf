package hybrid

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/hybridcache/hybridcache/internal/message"
)

// TestOpsDocumented checks the list in ops.go: every Op constant has a
// comment saying what call it names, a value of its own, and a name that
// spells that value (OpDeleteTag is "delete_tag").
func TestOpsDocumented(t *testing.T) {
	f, err := parser.ParseFile(gotoken.NewFileSet(), "ops.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != gotoken.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Op" {
				t.Errorf("%s: not declared as an Op", v.Names[0].Name)
				continue
			}
			name := v.Names[0].Name
			if v.Comment.Text() == "" && v.Doc.Text() == "" {
				t.Errorf("%s has no comment saying what call it names", name)
			}
			val, err := strconv.Unquote(v.Values[0].(*ast.BasicLit).Value)
			if err != nil {
				t.Fatal(err)
			}
			if other, ok := seen[val]; ok {
				t.Errorf("%s and %s are both %q", name, other, val)
			}
			seen[val] = name
			camel := "Op"
			for w := range strings.SplitSeq(val, "_") {
				camel += strings.ToUpper(w[:1]) + w[1:]
			}
			if name != camel {
				t.Errorf("%s is %q: want it named %s", name, val, camel)
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no Op constants found in ops.go")
	}
}

func TestReplayOf(t *testing.T) {
	for op, want := range map[Op]Op{OpSet: OpReplaySet, OpDelete: OpReplayDelete, OpDeleteTag: OpReplayDeleteTag, OpClear: OpReplayClear} {
		if got := replayOf(op); got != want {
			t.Errorf("replayOf(%s) = %s, want %s", op, got, want)
		}
	}
}

func TestChangeOf(t *testing.T) {
	for _, tt := range []struct {
		m    message.Message
		want Op
	}{
		{message.Message{Op: message.OpSet, Keys: []string{"k"}}, OpSet},
		{message.Message{Op: message.OpDelete, Keys: []string{"k"}}, OpDelete},
		{message.Message{Op: message.OpExpire, Keys: []string{"k"}}, OpExpire},
		{message.Message{Op: message.OpTag, Keys: []string{"t"}}, OpDeleteTag},
		{message.Message{Op: message.OpTag, Keys: []string{clearTag}}, OpClear},
		{message.Message{Op: message.OpClear}, OpClear},
	} {
		if got := changeOf(&tt.m); got != tt.want {
			t.Errorf("changeOf(%v %q) = %s, want %s", tt.m.Op, tt.m.Keys, got, tt.want)
		}
	}
}
