package token_test

import (
	"fmt"

	"github.com/mesh-provisioner/mesh-provisioner/mesh/token"
)

func ExampleEscape() {
	fmt.Println(token.Escape("shell:zsh:normal"))
	fmt.Println(token.Escape("a=b"))
	// Output:
	// shell=3Azsh=3Anormal
	// a=3Db
}

func ExampleUnescape() {
	text, err := token.Unescape("shell=3Azsh=3Anormal")
	fmt.Println(text, err)
	_, err = token.Unescape("shell:zsh")
	fmt.Println(err)
	// Output:
	// shell:zsh:normal <nil>
	// token: "shell:zsh": byte ":" must be escaped at byte 5
}
