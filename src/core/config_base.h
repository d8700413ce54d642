/* config_base.h: what every config section header shares: the size of a string key's buffer. */
#pragma once

#define CONFIG_STR 256
