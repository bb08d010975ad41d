//! YAML fixtures shared by the lib tests and the e2e tests (included there by path).

/// A "billion laughs" document: `levels` anchors, each a list of ten aliases of the one
/// before, so it expands to 10^levels nodes if aliases are replayed without a cap.
pub fn alias_bomb(levels: usize) -> String {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..levels {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            [prev.as_str(); 10].join(", ")
        ));
    }
    text
}
