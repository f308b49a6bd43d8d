"""The coordinator: pure group and prefix machines and the assignor, with thin trio shells around them."""
