// Command readiness judges a Kubernetes object the way two widely used clients do, so that the
// test suite checks the operator's status against their real code rather than a re-implementation:
//
//	readiness kstatus < object.json        the kstatus library of sigs.k8s.io/cli-utils (what Flux
//	                                       and Helm 4 wait on): InProgress, Current, Failed, ...
//	readiness argocd SCRIPT < object.json  an Argo CD custom health check in gopher-lua, the Lua VM
//	                                       Argo CD embeds: Healthy, Progressing, Degraded, ...
//
// It prints one JSON object, {"status": "...", "message": "..."}, and exits 1 on any error.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "readiness:", err)
		os.Exit(1)
	}
}

func run(args []string, in io.Reader, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: readiness kstatus | readiness argocd SCRIPT (object as JSON on stdin)")
	}
	raw, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("reading the object: %w", err)
	}
	var object map[string]interface{}
	if err := json.Unmarshal(raw, &object); err != nil {
		return fmt.Errorf("the object is not JSON: %w", err)
	}
	var v verdict
	switch {
	case args[0] == "kstatus" && len(args) == 1:
		v, err = kstatus(raw)
	case args[0] == "argocd" && len(args) == 2:
		v, err = argocd(args[1], object)
	default:
		return fmt.Errorf("unknown arguments %q", args)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(v)
}

// kstatus decodes the object as client-go does (integers stay int64) and computes its status.
func kstatus(raw []byte) (verdict, error) {
	object := &unstructured.Unstructured{}
	if err := object.UnmarshalJSON(raw); err != nil {
		return verdict{}, fmt.Errorf("the object is not a Kubernetes object: %w", err)
	}
	result, err := status.Compute(object)
	if err != nil {
		return verdict{}, fmt.Errorf("kstatus: %w", err)
	}
	return verdict{Status: result.Status.String(), Message: result.Message}, nil
}

// argocd runs a health script as Argo CD does: only the base, table, string and math libraries
// open, the object in the global `obj`, and a table {status, message} returned.
func argocd(script string, object map[string]interface{}) (verdict, error) {
	source, err := os.ReadFile(script)
	if err != nil {
		return verdict{}, fmt.Errorf("reading the script: %w", err)
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
	} {
		l.Push(l.NewFunction(lib.open))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	l.SetGlobal("obj", toLua(l, object))
	if err := l.DoString(string(source)); err != nil {
		return verdict{}, fmt.Errorf("the health script failed: %w", err)
	}
	returned, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return verdict{}, fmt.Errorf("the health script returned %s, not a table", l.Get(-1).Type())
	}
	return verdict{
		Status:  lua.LVAsString(returned.RawGetString("status")),
		Message: lua.LVAsString(returned.RawGetString("message")),
	}, nil
}

// toLua converts decoded JSON into Lua values: objects and arrays become tables (arrays indexed
// from 1), numbers become Lua numbers, null becomes nil.
func toLua(l *lua.LState, value interface{}) lua.LValue {
	switch v := value.(type) {
	case map[string]interface{}:
		table := l.NewTable()
		for key, item := range v {
			table.RawSetString(key, toLua(l, item))
		}
		return table
	case []interface{}:
		table := l.NewTable()
		for _, item := range v {
			table.Append(toLua(l, item))
		}
		return table
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	default:
		return lua.LNil
	}
}
