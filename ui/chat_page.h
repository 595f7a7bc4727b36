#pragma once
// The chat page `rowlm serve` answers GET / with: one self-contained HTML
// document (stylesheet and scripts inline, nothing fetched when it loads),
// built from ui/index.html, chat.css, markdown.js and chat.js by
// ui/embed_page.cmake and compiled into the binary.

#include <string_view>

namespace rowlm::ui {

struct ChatPage {
  std::string_view html;  // UTF-8
  // The Content-Security-Policy to send with it: only the page's own inline
  // script and style (by hash) run, and it may connect to its origin alone.
  std::string_view content_security_policy;
};

// Static data; thread-safe.
ChatPage chat_page();

}  // namespace rowlm::ui
