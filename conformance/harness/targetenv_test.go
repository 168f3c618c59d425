package harness

import (
	"reflect"
	"slices"
	"testing"
)

// TestTargetEnvFieldsComplete: every TargetEnv field a template can use is documented in
// TargetEnvFields, and nothing else is.
func TestTargetEnvFieldsComplete(t *testing.T) {
	var fields, documented []string
	for i := 0; i < reflect.TypeFor[TargetEnv]().NumField(); i++ {
		fields = append(fields, reflect.TypeFor[TargetEnv]().Field(i).Name)
	}
	for _, f := range TargetEnvFields {
		documented = append(documented, f.Name)
	}
	slices.Sort(fields)
	slices.Sort(documented)
	if !slices.Equal(fields, documented) {
		t.Fatalf("TargetEnv fields %v, documented %v", fields, documented)
	}
}
